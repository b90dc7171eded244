// resume_spec: train.resume parsed once into what it asks for: "auto" (the newest checkpoint that
// verifies, or a fresh start), "never" (a fresh start), or any other text: the checkpoint folder
// at that path (an error if it cannot be loaded). Config::validate rejects an empty value.
#pragma once
#include <string>

namespace ms {

enum class ResumeMode { kAuto, kNever, kPath };

struct ResumeSpec {
  ResumeMode mode = ResumeMode::kAuto;
  std::string path;  // kPath: the checkpoint folder
};

inline ResumeSpec parse_resume(const std::string& value) {
  if (value == "auto") return {ResumeMode::kAuto, ""};
  if (value == "never") return {ResumeMode::kNever, ""};
  return {ResumeMode::kPath, value};
}

}  // namespace ms
