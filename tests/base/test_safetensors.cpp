// test_safetensors: the safetensors reader against hostile files (checkpoints are read back): a
// round trip of what we write, then hand-made headers that must each be refused with the file and
// the tensor named: negative and overflowing shapes, a header over the format's 100 MB limit,
// overlapping and holey offsets, bytes after the last tensor, duplicate names, fields of the wrong
// type, a header that is not an object, non-string metadata.
#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include "base/safetensors.h"
#include "common/test_util.h"

using namespace ms;

namespace {

class Safetensors : public ms::testing::TempDirTest {
 protected:
  const char* tag() const override { return "ms_st"; }
  // A file with this JSON header (padded to 8) and `data` bytes after it; returns its path.
  std::string file(const std::string& name, std::string header, size_t data, uint64_t claimed_len = 0) {
    while (header.size() % 8) header.push_back(' ');
    const std::string p = path(name);
    std::ofstream f(p, std::ios::binary);
    const uint64_t n = claimed_len ? claimed_len : header.size();
    f.write(reinterpret_cast<const char*>(&n), 8);
    f << header << std::string(data, '\0');
    return p;
  }
  void refused(const std::string& p, const std::vector<std::string>& parts) {
    std::vector<std::string> all = parts;
    all.push_back(p);
    ms::testing::expect_error([&] { load_safetensors(p); }, all);
  }
};

TEST_F(Safetensors, RoundTripAndAWellFormedHandMadeFile) {
  StFile f;
  const float a[6] = {1, 2, 3, 4, 5, 6};
  const int32_t b[2] = {7, -8};
  f.tensors["a"] = st_f32({2, 3}, a);
  f.tensors["b"] = st_i32({2}, b);
  f.tensors["empty"] = st_f32({0, 4}, nullptr);
  f.metadata["format"] = "pt";
  save_safetensors(path("rt.safetensors"), f);
  const StFile g = load_safetensors(path("rt.safetensors"));
  EXPECT_EQ(g.at("a").shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(g.at("a").to_f64()[5], 6.0);
  EXPECT_EQ(g.at("b").i32()[1], -8);
  EXPECT_EQ(g.at("empty").numel(), 0u);
  EXPECT_EQ(g.metadata.at("format"), "pt");
  const std::string ok = file("ok", R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 8);
  EXPECT_NO_THROW(load_safetensors(ok));
}

TEST_F(Safetensors, HostileHeadersAreRefusedNamingTheTensor) {
  refused(file("neg", R"({"w":{"dtype":"F32","shape":[-1,-1],"data_offsets":[0,4]}})", 4), {"'w'", "negative"});
  refused(file("ovf", R"({"w":{"dtype":"F32","shape":[4294967296,4294967296,16],"data_offsets":[0,4]}})", 4),
          {"'w'", "overflows"});
  refused(file("big", "{}", 0, 100'000'001), {"limit"});
  refused(file("overlap", R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                          R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", 12),
          {"'b'", "overlaps"});
  refused(file("hole", R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                       R"("b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})", 12),
          {"'b'", "hole"});
  refused(file("tail", R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 12), {"belong to no tensor"});
  refused(file("outside", R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 8), {"'a'", "outside"});
  refused(file("dup", R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                      R"("a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 8),
          {"'a'", "twice"});
  refused(file("shape_type", R"({"a":{"dtype":"F32","shape":"2","data_offsets":[0,8]}})", 8), {"'a'", "'shape'"});
  refused(file("dim_type", R"({"a":{"dtype":"F32","shape":[2.5],"data_offsets":[0,8]}})", 8), {"'a'", "not an integer"});
  refused(file("dtype_type", R"({"a":{"dtype":7,"shape":[2],"data_offsets":[0,8]}})", 8), {"'a'", "'dtype'"});
  refused(file("offs_type", R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,-8]}})", 8), {"'a'", "'data_offsets'"});
  refused(file("offs_size", R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", 4), {"'a'", "do not hold"});
  refused(file("entry_type", R"({"a":[1,2]})", 0), {"'a'", "not an object"});
  refused(file("not_object", R"([1,2,3])", 0), {"not a JSON object"});
  refused(file("meta_type", R"({"__metadata__":{"k":1}})", 0), {"metadata 'k'"});
  refused(file("u8", R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}})", 4), {"'a'", "unsupported dtype"});
}

}  // namespace
