// test_checkpoint_reader: the reader's parallel read-and-verify pass (CheckpointReader::verify_files)
// over a hand-made checkpoint folder of 6 files, each holding one ZeRO piece of tensor "w" and of
// "v" (the pieces' values known: w[i] = i, v[i] = -i).
//  - On 1 and on 4 threads, every file is read once (files_read, bytes_read = the files' sizes), and
//    the tensors assembled afterwards equal the values written.
//  - A flipped byte in two files: the error names the first of them in the order asked for (the same
//    file whatever the thread count) and its checksum; a truncated file is named with its size; no
//    file is kept after a failed pass, and the good files alone still verify.
//  - files_of lists the files of one part or of every part, each once.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "base/safetensors.h"
#include "ckpt/checkpoint_reader.h"
#include "ckpt/manifest.h"
#include "ckpt/storage.h"
#include "common/test_util.h"

namespace ms {
namespace {

constexpr int kFiles = 6;
constexpr uint64_t kPiece = 1000;  // elements of each tensor per file

class CheckpointReaderTest : public testing::TempDirTest {
 protected:
  const char* tag() const override { return "ckpt_reader"; }
  void SetUp() override {
    TempDirTest::SetUp();
    std::filesystem::create_directories(path("step-00000001"));
    m_.step = 1;
    m_.tensors["w"] = {{static_cast<int64_t>(kFiles * kPiece)}, "replicated"};
    m_.tensors["v"] = {{static_cast<int64_t>(kFiles * kPiece)}, "replicated"};
    for (int f = 0; f < kFiles; f++) {
      std::vector<float> w(kPiece), v(kPiece);
      for (uint64_t i = 0; i < kPiece; i++) {
        w[i] = static_cast<float>(f * kPiece + i);
        v[i] = -w[i];
      }
      StFile st;
      st.tensors["w.p"] = st_f32({static_cast<int64_t>(kPiece)}, w.data());
      st.tensors["v.p"] = st_f32({static_cast<int64_t>(kPiece)}, v.data());
      ManifestFile mf;
      mf.name = "rank-" + std::to_string(f) + ".safetensors";
      mf.rank = mf.dp = f;
      const std::string file = path("step-00000001/" + mf.name);
      save_safetensors(file, st);
      const std::string bytes = testing::slurp(file);
      mf.bytes = bytes.size();
      mf.xxh64 = xxh64_hex(xxh64_of(bytes.data(), bytes.size()));
      const uint64_t lo = f * kPiece, hi = lo + kPiece;
      mf.entries.push_back({"w.p", "w", StateKind::kParam, 1, 0, lo, hi});
      mf.entries.push_back({"v.p", "v", StateKind::kMoment1, 1, 0, lo, hi});
      m_.files.push_back(mf);
    }
    storage_ = std::make_unique<LocalStorage>(dir_.string(), false);
  }
  std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (const ManifestFile& f : m_.files) out.push_back(f.name);
    return out;
  }
  void flip(int f, size_t at) {
    std::fstream io(path("step-00000001/" + m_.files[f].name), std::ios::in | std::ios::out | std::ios::binary);
    io.seekg(static_cast<std::streamoff>(at));
    char c = 0;
    io.read(&c, 1);
    c = static_cast<char>(c ^ 0x20);
    io.seekp(static_cast<std::streamoff>(at));
    io.write(&c, 1);
  }
  Manifest m_;
  std::unique_ptr<LocalStorage> storage_;
};

TEST_F(CheckpointReaderTest, ParallelVerifyReadsEachFileOnceAndAssemblesTheSameTensors) {
  for (int threads : {1, 4}) {
    CheckpointReader rd(*storage_, "step-00000001", m_, ModelConfig{});
    std::vector<std::string> asked = names();
    asked.push_back(asked.front());  // asked twice: read once
    rd.verify_files(asked, threads);
    uint64_t bytes = 0;
    for (const ManifestFile& f : m_.files) bytes += f.bytes;
    EXPECT_EQ(rd.files_read(), kFiles) << threads;
    EXPECT_EQ(rd.bytes_read(), bytes) << threads;
    const std::vector<float> w = rd.whole("w", StateKind::kParam), v = rd.whole("v", StateKind::kMoment1);
    ASSERT_EQ(w.size(), kFiles * kPiece);
    for (size_t i = 0; i < w.size(); i++) {
      ASSERT_EQ(w[i], static_cast<float>(i)) << i;
      ASSERT_EQ(v[i], -static_cast<float>(i)) << i;
    }
    EXPECT_EQ(rd.files_read(), kFiles) << "whole() read nothing again";
  }
}

TEST_F(CheckpointReaderTest, TheFirstBadFileInTheOrderAskedIsNamed) {
  flip(4, m_.files[4].bytes - 8);
  flip(1, m_.files[1].bytes - 8);
  for (int threads : {1, 3, 8}) {
    CheckpointReader rd(*storage_, "step-00000001", m_, ModelConfig{});
    try {
      rd.verify_files(names(), threads);
      FAIL() << "no error on " << threads << " threads";
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("rank-1.safetensors: checksum xxh64"), std::string::npos) << what;
      EXPECT_NE(what.find("the file is corrupt"), std::string::npos) << what;
    }
    EXPECT_EQ(rd.files_read(), 0) << "nothing kept from a failed pass";
  }
  CheckpointReader rd(*storage_, "step-00000001", m_, ModelConfig{});
  rd.verify_files({m_.files[0].name, m_.files[5].name}, 2);  // the good ones alone
  EXPECT_EQ(rd.files_read(), 2);
}

TEST_F(CheckpointReaderTest, ATruncatedFileIsNamedWithItsSize) {
  std::filesystem::resize_file(path("step-00000001/" + m_.files[2].name), 100);
  CheckpointReader rd(*storage_, "step-00000001", m_, ModelConfig{});
  testing::expect_error([&] { rd.verify_files(names(), 4); },
                        {"rank-2.safetensors: 100 bytes, the manifest says", "truncated or replaced"});
}

TEST_F(CheckpointReaderTest, FilesOfOnePartOrEveryPart) {
  CheckpointReader rd(*storage_, "step-00000001", m_, ModelConfig{});
  EXPECT_EQ(rd.files_of("w", StateKind::kParam, -1), names());
  EXPECT_EQ(rd.files_of("w", StateKind::kParam, 0), names());
  EXPECT_TRUE(rd.files_of("w", StateKind::kParam, 1).empty());
}

}  // namespace
}  // namespace ms
