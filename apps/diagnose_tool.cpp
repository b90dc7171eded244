// diagnose_tool.cpp: see diagnose_tool.h.
#include "diagnose_tool.h"

#include <fmt/format.h>

#include "report/diagnose.h"  // diagnose_run, format_diagnosis

namespace ms {

int run_diagnose(const std::string& run_dir) {
  const Diagnosis d = diagnose_run(run_dir);
  fmt::print("{}", format_diagnosis(d));
  return d.culprits.empty() ? 1 : 0;
}

}  // namespace ms
