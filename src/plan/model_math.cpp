// model_math.cpp: see model_math.h.
#include "plan/model_math.h"

#include "base/check.h"

namespace ms::plan {

namespace {
void check_shape(const GptShape& m) {
  MS_CHECK(m.layers > 0 && m.hidden > 0 && m.heads > 0 && m.seq > 0 && m.vocab > 0,
           "plan: model shape needs layers, hidden, heads, seq and vocab > 0 (got {}, {}, {}, {}, {})", m.layers,
           m.hidden, m.heads, m.seq, m.vocab);
}
}  // namespace

GptShape shape_of(const ModelConfig& m, int seq) {
  GptShape s;
  s.layers = m.n_layer, s.hidden = m.n_embd, s.heads = m.n_head, s.seq = seq, s.vocab = m.vocab_size;
  return s;
}

double megatron_params(const GptShape& m) {
  check_shape(m);
  const double l = m.layers, h = m.hidden;
  return 12.0 * l * h * h * (1.0 + 13.0 / (12.0 * h) + (m.vocab + m.seq) / (12.0 * l * h));
}

double megatron_flops_per_token(const GptShape& m) {
  check_shape(m);
  const double l = m.layers, h = m.hidden;
  return 72.0 * l * h * h * (1.0 + m.seq / (6.0 * h) + m.vocab / (12.0 * l * h));
}

double layer_activation_bytes(const GptShape& m, int b, int t, bool sequence_parallel, Recompute r) {
  check_shape(m);
  MS_CHECK(b > 0 && t > 0, "plan: micro-batch {} and tensor parallel {} must be > 0", b, t);
  const double s = m.seq, h = m.hidden, a = m.heads, sbh = s * b * h;
  if (r == Recompute::kFull) return sequence_parallel ? 2.0 * sbh / t : 2.0 * sbh;
  const double scores = r == Recompute::kSelective ? 0.0 : 5.0 * a * s / h;  // the softmax / dropout s x s terms
  if (sequence_parallel) return sbh / t * (34.0 + scores);
  return sbh * (10.0 + 24.0 / t + scores / t);
}

}  // namespace ms::plan
