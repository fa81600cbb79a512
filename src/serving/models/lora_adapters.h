#pragma once
// The LoRA adapters a server offers (issue 54): each a name clients put in "model", the base
// model it applies to and its PEFT directory (--lora NAME=PATH, NAME=MODEL:PATH). What is loaded
// is kept per loaded version of the base (ServedModel::lora), so a reload of the base loads the
// adapter again for the new weights.

#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace tf {

struct LoraSpec {
  std::string name;          // what requests name
  std::string base;          // the served model it applies to
  std::string path;          // its PEFT directory
  bool from_config = false;  // a model config's lora block (replaced by the next config)
  bool operator==(const LoraSpec&) const = default;
};

// "NAME=PATH" (base: `default_base`) or "NAME=MODEL:PATH"; Error (kInvalidArgument) for
// anything else. A PATH holding ':' (no MODEL) stays a path when the text before it names no
// model in `models`.
LoraSpec parse_lora_flag(const std::string& value, const std::string& default_base,
                         const std::vector<std::string>& models);

class LoraAdapters {
 public:
  // Adds an adapter; Error (kInvalidArgument) when another adapter has its name.
  void add(LoraSpec spec);
  bool remove(const std::string& name);
  // The model config's adapters replace the last config's (--lora and run-time loads stay);
  // Error (kInvalidArgument), nothing changed, when one takes the name of another adapter.
  void set_from_config(const std::vector<LoraSpec>& specs);
  std::optional<LoraSpec> find(const std::string& name) const;
  std::vector<LoraSpec> list() const;  // by name

 private:
  mutable std::mutex mu_;
  std::map<std::string, LoraSpec> specs_;
};

}  // namespace tf
