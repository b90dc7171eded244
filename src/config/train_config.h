// train_config: the [train] section of the config tree: batch shape, steps, precision, run directory.
// Fields are declared once, in the X-macro list below (X(type, name, default, doc)); config.h builds
// loading, overrides, help, the resolved dump and validation from it.
#pragma once
#include <string>

#include "config/config_enum.h"  // MS_CONFIG_ENUM, MS_DECLARE_FIELD
#include "base/device.h"  // Device (train.device)
#include "base/dtype.h"  // DType (train.precision)

namespace ms {

// train.precision: the GEMMs' element type, DType::kF32 or DType::kBF16 (base/dtype.h spells them).
MS_CONFIG_ENUM(DType, {DType::kF32, "fp32"}, {DType::kBF16, "bf16"})
// train.device: where the model, its gradients and the optimizer state live and compute.
MS_CONFIG_ENUM(Device, {Device::kCpu, "cpu"}, {Device::kCuda, "cuda"})
// train.progress: how the run shows its steps.
enum class ProgressMode : uint8_t { kAuto, kBar, kLines };
MS_CONFIG_ENUM(ProgressMode, {ProgressMode::kAuto, "auto"}, {ProgressMode::kBar, "bar"}, {ProgressMode::kLines, "lines"})

#define MS_TRAIN_FIELDS(X)                                                                         \
  X(int, steps, 1000, "optimizer steps to train")                                                 \
  X(int, batch_size, 8, "micro-batch size B (sequences per forward/backward)")                     \
  X(int, seq_len, 256, "sequence length T (<= model.max_seq_len)")                                \
  X(int, grad_accum, 1, "micro-batches accumulated per optimizer step (per data-parallel rank)")  \
  X(int, global_batch, 0, "sequences per optimizer step over all ranks (0 = batch_size * grad_accum * dp); when set, grad_accum = global_batch / (dp * batch_size)") \
  X(int, seed, 1337, "seed of weight init, data order and sampling")                               \
  X(int, eval_every, 100, "validation loss every N steps (0 = only at the end)")                   \
  X(int, eval_batches, 20, "micro-batches per validation")                                        \
  X(int, sample_tokens, 64, "tokens of text generated at the end (0 = none)")                      \
  X(std::string, out_dir, "runs/default", "run directory: log.jsonl, resolved config, final model") \
  X(int, threads, 0, "OpenMP threads (0 = all cores)")                                            \
  X(bool, pin_threads, true, "pin each OpenMP thread to its own CPU (ranks on one machine take disjoint CPUs; skipped when the machine's ranks x threads exceed its cores)") \
  X(bool, huge_pages, false, "back the state and activation buffers (2 MiB and larger) with transparent huge pages (madvise): a restart after a fault is ~0.5-0.9 s faster on this class of machine (a killed rank's GiBs are freed in ms, the restored state refills recycled pages with 512x fewer faults); the first touch of memory no process used before can be slower (+1-3 s in a process's first step, measured on a VM); ignored where the kernel has no transparent huge pages") \
  X(DType, precision, DType::kF32, "GEMM precision: 'fp32', 'bf16' (every linear layer's GEMMs take bf16 inputs with fp32 accumulation, on AMX when present; master weights, gradients, optimizer state, LayerNorm, attention, softmax and loss stay fp32), or 'auto' (bf16 where the CPU has bf16 units, AMX-BF16 or AVX512-BF16, else fp32; resolved at load)") \
  X(Device, device, Device::kCpu, "where the model trains: 'cpu', or 'cuda' (one NVIDIA GPU, device 0: parameters, gradients, activations and optimizer state in GPU memory, every kernel on the GPU; every parallel layout too: each process uses GPU LOCAL_RANK modulo the GPUs it sees, so several processes may share one GPU over gloo or mpi; a build without CUDA or a machine without a usable GPU is a named error before training)") \
  X(std::string, init_from, "", "a Hugging Face folder to start from (config.json + model.safetensors or a sharded model.safetensors.index.json; GPT2LMHeadModel, LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM or a megascale export): its config.json sets the [model] architecture (pad_vocab_to, init_std and recompute stay this config's), its weights the initial parameters, with a fresh optimizer at step 0; a resumed checkpoint takes precedence") \
  X(std::string, resume, "auto", "'auto' = continue from the newest checkpoint in checkpoint.dir that verifies (none: start fresh), 'never' = start fresh, or a checkpoint folder (an invalid one is an error)") \
  X(int, exit_after, 0, "stop after N steps of this invocation with a checkpoint (Megatron's --exit-interval; 0 = run to train.steps)") \
  X(ProgressMode, progress, ProgressMode::kAuto, "progress display: 'auto' (bar on a terminal), 'bar' or 'lines'")

struct TrainConfig {
  MS_TRAIN_FIELDS(MS_DECLARE_FIELD)
  // Checks the fields of this section alone; Config::validate() runs it, then the cross-section checks.
  void validate() const;
};

}  // namespace ms
