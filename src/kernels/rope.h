// rope: rotary position embedding (RoPE, Su et al. 2021) in Hugging Face Llama's convention
// ("rotate_half"): inside a head of HS channels, channel i < H = HS/2 pairs with channel i + H and
// the pair is rotated by the angle t * theta^(-2i/HS) of the row's position t:
//   x'[i] = x[i] cos - x[i+H] sin,   x'[i+H] = x[i+H] cos + x[i] sin.
// It is applied in place to the query and key heads of the packed attention input qkv
// (rows of (NH + 2*NKV)*HS floats: NH query heads, NKV key heads, NKV value heads; values are not
// touched), on a range of rows, so that the QKV GEMM's row loop can rotate rows while they are
// still in cache instead of a separate pass over the whole buffer. Row r holds position r % T.
// Guarantees: every element is computed independently (bit-identical for any thread count); the
// angle table is computed once on the host in double and rounded once, so every device rotates
// with the same cos/sin bits.
#pragma once

namespace ms {

// cos, sin (T, HS/2): cos(t * theta^(-2i/HS)) and its sine, in double, rounded to float. HS even.
void rope_table(float* cos, float* sin, int T, int HS, double theta);

// Rotates the query and key heads of rows [lo, hi) of qkv in place (position of row r: r % T).
void rope_forward(float* qkv, const float* cos, const float* sin, int lo, int hi, int T, int NH, int NKV, int HS);

// The transpose (the inverse rotation): rows [lo, hi) of dqkv, the gradient with respect to the
// rotated queries and keys, become the gradient with respect to the values before rotation.
void rope_backward(float* dqkv, const float* cos, const float* sin, int lo, int hi, int T, int NH, int NKV,
                   int HS);

}  // namespace ms
