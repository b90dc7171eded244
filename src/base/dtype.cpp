// dtype.cpp: see dtype.h. One table holds every spelling, so they cannot drift apart.
#include "base/dtype.h"

namespace ms {

namespace {

struct DTypeInfo {
  DType type;
  size_t size;
  const char* name;         // config / logs
  const char* safetensors;  // safetensors header
  uint8_t megatron;         // Megatron .idx code, 0 = none
};

constexpr DTypeInfo kTable[] = {
    {DType::kF32, 4, "fp32", "F32", 7},   {DType::kBF16, 2, "bf16", "BF16", 0}, {DType::kF16, 2, "fp16", "F16", 0},
    {DType::kF64, 8, "fp64", "F64", 6},   {DType::kU8, 1, "uint8", "U8", 1},    {DType::kI8, 1, "int8", "I8", 2},
    {DType::kI16, 2, "int16", "I16", 3},  {DType::kU16, 2, "uint16", "U16", 8}, {DType::kI32, 4, "int32", "I32", 4},
    {DType::kI64, 8, "int64", "I64", 5},
};

const DTypeInfo& info(DType t) {
  for (const DTypeInfo& i : kTable)
    if (i.type == t) return i;
  return kTable[0];  // unreachable: every enumerator is in the table
}

template <class Pred>
std::optional<DType> find(Pred p) {
  for (const DTypeInfo& i : kTable)
    if (p(i)) return i.type;
  return std::nullopt;
}

}  // namespace

size_t dtype_size(DType t) { return info(t).size; }
const char* dtype_name(DType t) { return info(t).name; }
const char* safetensors_dtype(DType t) { return info(t).safetensors; }
uint8_t megatron_dtype_code(DType t) { return info(t).megatron; }

std::optional<DType> dtype_from_name(std::string_view s) {
  return find([&](const DTypeInfo& i) { return s == i.name; });
}
std::optional<DType> dtype_from_safetensors(std::string_view s) {
  return find([&](const DTypeInfo& i) { return s == i.safetensors; });
}
std::optional<DType> dtype_from_megatron_code(uint8_t code) {
  return find([&](const DTypeInfo& i) { return code != 0 && code == i.megatron; });
}

}  // namespace ms
