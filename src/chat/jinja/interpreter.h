#pragma once
// Renders a parsed template the way jinja2 does: its scoping (a for-loop iteration and a macro
// call get scopes of their own, an if does not), Undefined semantics, Python operators, and
// attribute lookup through jinja2's immutable sandbox. Every render runs under limits on work,
// output and recursion, so no template can run away.

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "chat/jinja/ast.h"
#include "chat/jinja/value.h"

namespace tf::jinja {

struct Limits {
  size_t max_output_bytes = size_t{64} << 20;  // also caps every string a template builds
  int64_t max_steps = 50'000'000;              // evaluations, statements, loop iterations, items
  int max_depth = 500;                         // nested evaluations and macro calls
  // Wall time for one render (0: none). Checked, with the request's CancelToken, every 1024
  // steps: a render stops soon after its time is up or its client leaves.
  std::chrono::milliseconds max_time{2000};
};

struct Scope;

class Interpreter {
 public:
  // `globals` then `context` are the outermost scopes (the context shadows globals).
  Interpreter(const Limits& limits, Dict globals, Dict context);
  ~Interpreter();

  std::string render(const Body& body);

  // What filters, tests and methods need from the interpreter.
  Value call(const Value& callee, CallArgs& args);
  Value get_attr(const Value& obj, std::string_view name);
  Value get_item(const Value& obj, const Value& key);
  // The items a for loop visits: list items, dict keys, string code points.
  std::vector<Value> iterate(const Value& v);
  Value new_namespace(Dict attrs);
  // Accounts for `units` of work; throws once the budget is spent.
  void charge(int64_t units);
  // Refuses a string or list past the size limits before it is built.
  void check_string_size(size_t bytes) const;
  void check_list_size(size_t items) const;
  int line() const { return line_; }

 private:
  enum class Flow { kNormal, kBreak, kContinue };
  class DepthGuard;
  class ScopeSwap;

  Flow exec(const Body& body);
  Flow exec(const Node& node);
  void exec_for(const Node& node);
  void define_macro(const Node& node);
  Value call_macro(const Node& macro, const std::weak_ptr<Scope>& defined_in, CallArgs& args);
  std::string capture(const Body& body);
  Value apply_filter_chain(const Expr* chain, Value input);
  void assign(const Target& target, const Value& value);

  Value eval(const Expr& e);
  Value eval_call(const Expr& e);
  Value eval_slice(const Expr& e);
  Value eval_compare(const Expr& e);
  CallArgs eval_args(const Expr& e, size_t first);
  Value lookup(const std::string& name) const;
  void write(std::string_view text);

  Limits limits_;
  std::vector<std::unique_ptr<Namespace>> namespaces_;  // outlive every Value of the render
  std::shared_ptr<Scope> scope_;
  std::string* out_ = nullptr;
  int64_t steps_ = 0, checked_steps_ = 0;
  std::chrono::steady_clock::time_point deadline_ = std::chrono::steady_clock::time_point::max();
  int depth_ = 0;
  int line_ = 0;
};

// Python's binary operators and `in`, as the template sees them.
Value binary_op(Interpreter& in, BinaryOp op, const Value& a, const Value& b);
bool contains(const Value& container, const Value& item);

}  // namespace tf::jinja
