#pragma once
// The tokenflow subcommands. Each registers its options on the CLI11 app and returns the action
// to run when it is chosen.

#include <CLI/CLI.hpp>

#include <functional>

namespace tf::cli {

using Action = std::function<int()>;

Action add_generate(CLI::App& app);
Action add_inspect(CLI::App& app);
Action add_tokenize(CLI::App& app);
Action add_bench(CLI::App& app);

}  // namespace tf::cli
