// diagnose_tool: `megascale diagnose RUN_DIR`: prints the hang report of report/diagnose.h (the
// collectives ranks wait in, the waiters, and the culprits with their world rank and (tp, dp, pp)).
// Exit code 0 when it could name culprits, 1 when the dumps name none (the report says why).
#pragma once
#include <string>

namespace ms {

int run_diagnose(const std::string& run_dir);

}  // namespace ms
