// dtype: the one element type enum of megascale and its spellings. Every layer names element types
// with DType: communication buffers, the training precision (config "fp32" / "bf16"), safetensors
// headers ("F32", "BF16", ...) and Megatron .idx dtype codes (1..8) all convert through here.
#pragma once
#include <cstddef>  // size_t
#include <cstdint>
#include <optional>
#include <string_view>

namespace ms {

enum class DType : uint8_t { kF32, kBF16, kF16, kF64, kU8, kI8, kI16, kU16, kI32, kI64 };

// Bytes per element.
size_t dtype_size(DType t);
// The config / log spelling: "fp32", "bf16", "fp16", "fp64", "uint8", "int8", "int16", "uint16",
// "int32", "int64".
const char* dtype_name(DType t);
std::optional<DType> dtype_from_name(std::string_view s);
// Safetensors' spelling: "F32", "BF16", "F16", "F64", "U8", "I8", "I16", "U16", "I32", "I64".
const char* safetensors_dtype(DType t);
std::optional<DType> dtype_from_safetensors(std::string_view s);
// Megatron-LM's indexed-dataset dtype codes (1 uint8, 2 int8, 3 int16, 4 int32, 5 int64,
// 6 float64, 7 float32, 8 uint16); F16 and BF16 have none (0).
uint8_t megatron_dtype_code(DType t);
std::optional<DType> dtype_from_megatron_code(uint8_t code);

}  // namespace ms
