#include "chat/jinja/interpreter.h"

#include <algorithm>

#include "core/cancel.h"

#include "chat/jinja/builtins.h"
#include "chat/jinja/py_format.h"
#include "chat/jinja/py_text.h"

namespace tf::jinja {

// Variables of one level: the globals, the render context, a loop iteration, a macro call.
struct Scope {
  std::shared_ptr<Scope> parent;
  std::vector<std::pair<std::string, Value>> vars;

  const Value* find(std::string_view name) const {
    for (const Scope* s = this; s != nullptr; s = s->parent.get()) {
      for (const auto& [k, v] : s->vars) {
        if (k == name) return &v;
      }
    }
    return nullptr;
  }
  void set(const std::string& name, Value v) {
    for (auto& [k, old] : vars) {
      if (k == name) {
        old = std::move(v);
        return;
      }
    }
    vars.emplace_back(name, std::move(v));
  }
};

namespace {

[[noreturn]] void exhausted(const std::string& what) {
  throw TemplateError(ErrorKind::kResourceExhausted, what);
}

std::string object_name(const Value& v) {
  return v.is_none() ? "None" : type_name(v) + " object";
}

// jinja2's message for a missing attribute or item.
Value missing(const Value& obj, const Value& key) {
  if (key.is_string()) {
    return Value::undefined(
        fmt::format("'{}' has no attribute '{}'", object_name(obj), key.as_string()));
  }
  return Value::undefined(fmt::format("'{}' has no element {}", object_name(obj), to_repr(key)));
}

// Python's slice.indices(): the clamped start and stop, and the step.
struct SliceIndices {
  int64_t start, stop, step;
  // The positions the slice walks, in order.
  std::vector<size_t> positions() const {
    std::vector<size_t> out;
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
      out.push_back(static_cast<size_t>(i));
      if ((step > 0 && i > INT64_MAX - step) || (step < 0 && i < INT64_MIN - step)) break;
    }
    return out;
  }
};

SliceIndices slice_indices(int64_t length, const Value& start_v, const Value& stop_v,
                           const Value& step_v) {
  const int64_t step = step_v.is_none() ? 1 : step_v.as_integral();
  if (step == 0) render_fail("slice step cannot be zero");
  const int64_t lower = step < 0 ? -1 : 0;
  const int64_t upper = step < 0 ? length - 1 : length;
  auto clamp_index = [&](const Value& v, int64_t fallback) {
    if (v.is_none()) return fallback;
    int64_t i = v.as_integral();
    if (i < 0) {
      i = i < -length ? lower : i + length;
      if (i < lower) i = lower;
    } else if (i > upper) {
      i = upper;
    }
    return i;
  };
  return {clamp_index(start_v, step < 0 ? upper : lower),
          clamp_index(stop_v, step < 0 ? lower : upper), step};
}

}  // namespace

// Bounds recursion (nested evaluation, macro calls) to keep rendering off the end of the stack.
class Interpreter::DepthGuard {
 public:
  explicit DepthGuard(Interpreter& in) : in_(in) {
    if (++in_.depth_ > in_.limits_.max_depth) {
      exhausted(fmt::format("template recursion deeper than {} levels", in_.limits_.max_depth));
    }
  }
  ~DepthGuard() { --in_.depth_; }

 private:
  Interpreter& in_;
};

// Runs a statement body in a scope of its own, restoring the outer one after.
class Interpreter::ScopeSwap {
 public:
  ScopeSwap(Interpreter& in, std::shared_ptr<Scope> parent) : in_(in), saved_(in.scope_) {
    auto s = std::make_shared<Scope>();
    s->parent = std::move(parent);
    in_.scope_ = std::move(s);
  }
  ~ScopeSwap() { in_.scope_ = std::move(saved_); }

 private:
  Interpreter& in_;
  std::shared_ptr<Scope> saved_;
};

Interpreter::Interpreter(const Limits& limits, Dict globals, Dict context) : limits_(limits) {
  auto global_scope = std::make_shared<Scope>();
  for (auto& [k, v] : globals.entries) global_scope->set(k.as_string(), std::move(v));
  scope_ = std::make_shared<Scope>();
  scope_->parent = std::move(global_scope);
  for (auto& [k, v] : context.entries) {
    if (k.is_string()) scope_->set(k.as_string(), std::move(v));
  }
}

Interpreter::~Interpreter() = default;

std::string Interpreter::render(const Body& body) {
  if (limits_.max_time.count() > 0) deadline_ = std::chrono::steady_clock::now() + limits_.max_time;
  std::string out;
  out_ = &out;
  exec(body);
  out_ = nullptr;
  return out;
}

void Interpreter::charge(int64_t units) {
  steps_ += units;
  if (steps_ > limits_.max_steps) {
    exhausted(fmt::format("rendering takes more than {} steps", limits_.max_steps));
  }
  if (steps_ - checked_steps_ < 1024) return;
  checked_steps_ = steps_;
  check_cancelled();  // the client left, or its request's deadline passed
  if (std::chrono::steady_clock::now() >= deadline_) {
    exhausted(fmt::format("rendering takes longer than {} ms", limits_.max_time.count()));
  }
}

void Interpreter::check_string_size(size_t bytes) const {
  if (bytes > limits_.max_output_bytes) {
    exhausted(fmt::format("a string grows past {} bytes", limits_.max_output_bytes));
  }
}

void Interpreter::check_list_size(size_t items) const {
  constexpr size_t kMaxItems = size_t{1} << 20;
  if (items > kMaxItems) exhausted(fmt::format("a list grows past {} items", kMaxItems));
}

Value Interpreter::new_namespace(Dict attrs) {
  namespaces_.push_back(std::make_unique<Namespace>(Namespace{std::move(attrs)}));
  return Value::ns(namespaces_.back().get());
}

void Interpreter::write(std::string_view text) {
  if (out_->size() + text.size() > limits_.max_output_bytes) {
    exhausted(fmt::format("output grows past {} bytes", limits_.max_output_bytes));
  }
  out_->append(text);
}

std::string Interpreter::capture(const Body& body) {
  std::string buffer;
  std::string* saved = out_;
  out_ = &buffer;
  try {
    exec(body);
  } catch (...) {
    out_ = saved;
    throw;
  }
  out_ = saved;
  return buffer;
}

// ---- statements ---------------------------------------------------------------------------------

Interpreter::Flow Interpreter::exec(const Body& body) {
  for (const auto& node : body) {
    check_cancelled();  // a template loops over the request's messages
    const Flow flow = exec(*node);
    if (flow != Flow::kNormal) return flow;
  }
  return Flow::kNormal;
}

Interpreter::Flow Interpreter::exec(const Node& node) {
  DepthGuard guard(*this);
  charge(1);
  line_ = node.line;
  switch (node.kind) {
    case NodeKind::kText:
      write(node.text);
      break;
    case NodeKind::kPrint:
      for (const auto& e : node.exprs) {
        const Value v = eval(*e);
        write(v.is_string() ? std::string_view(v.as_string()) : std::string_view(to_str(v)));
      }
      break;
    case NodeKind::kIf:
      return exec(truthy(eval(*node.exprs[0])) ? node.body : node.else_body);
    case NodeKind::kFor:
      exec_for(node);
      break;
    case NodeKind::kSet:
      assign(node.targets[0], eval(*node.exprs[0]));
      break;
    case NodeKind::kSetBlock: {
      Value v;
      {
        ScopeSwap inner(*this, scope_);
        v = Value(capture(node.body));
      }
      if (node.filter) v = apply_filter_chain(node.filter.get(), std::move(v));
      assign(node.targets[0], v);
      break;
    }
    case NodeKind::kMacro:
      define_macro(node);
      break;
    case NodeKind::kBreak:
      return Flow::kBreak;
    case NodeKind::kContinue:
      return Flow::kContinue;
    case NodeKind::kScope: {
      ScopeSwap inner(*this, scope_);
      exec(node.body);
      break;
    }
    case NodeKind::kFilterBlock: {
      Value v;
      {
        ScopeSwap inner(*this, scope_);
        v = Value(capture(node.body));
      }
      const Value filtered = apply_filter_chain(node.filter.get(), std::move(v));
      write(to_str(filtered));
      break;
    }
    case NodeKind::kWith: {
      std::vector<Value> values;
      for (const auto& e : node.exprs) values.push_back(eval(*e));
      ScopeSwap inner(*this, scope_);
      for (size_t i = 0; i < values.size(); ++i) assign(node.targets[i], values[i]);
      return exec(node.body);
    }
  }
  return Flow::kNormal;
}

void Interpreter::exec_for(const Node& node) {
  std::vector<Value> items = iterate(eval(*node.exprs[0]));
  if (node.exprs.size() > 1) {  // {% for x in xs if cond %}: the loop sees only what passes
    std::vector<Value> kept;
    for (Value& item : items) {
      charge(1);
      ScopeSwap test_scope(*this, scope_);
      assign(node.targets[0], item);
      if (truthy(eval(*node.exprs[1]))) kept.push_back(std::move(item));
    }
    items = std::move(kept);
  }
  const int64_t n = static_cast<int64_t>(items.size());
  bool completed_an_iteration = false;
  for (int64_t i = 0; i < n; ++i) {
    charge(1);
    // A fresh scope per iteration: what the body sets is gone in the next one, as in jinja2.
    ScopeSwap iteration(*this, scope_);
    line_ = node.line;
    assign(node.targets[0], items[i]);
    Dict loop;
    auto set = [&](const char* key, Value v) {
      loop.entries.emplace_back(Value(key), std::move(v));
    };
    set("index", Value(i + 1));
    set("index0", Value(i));
    set("revindex", Value(n - i));
    set("revindex0", Value(n - i - 1));
    set("first", Value(i == 0));
    set("last", Value(i == n - 1));
    set("length", Value(n));
    set("depth", Value(1));
    set("depth0", Value(0));
    if (i > 0) set("previtem", items[i - 1]);
    if (i + 1 < n) set("nextitem", items[i + 1]);
    set("cycle", Value::function("cycle", [i](Interpreter&, CallArgs& args) {
          if (args.positional.empty()) render_fail("no items for cycling given");
          return args.positional[static_cast<size_t>(i) % args.positional.size()];
        }));
    scope_->set("loop", Value::dict(std::move(loop)));
    const Flow flow = exec(node.body);
    if (flow == Flow::kBreak) break;
    if (flow == Flow::kNormal) completed_an_iteration = true;
  }
  // jinja2 marks an iteration done at the end of the body, so an else branch also runs when every
  // iteration ended in break or continue.
  if (!completed_an_iteration && !node.else_body.empty()) {
    ScopeSwap else_scope(*this, scope_);
    exec(node.else_body);
  }
}

void Interpreter::define_macro(const Node& node) {
  std::weak_ptr<Scope> defined_in = scope_;
  const Node* macro = &node;
  scope_->set(node.text,
              Value::function(node.text, [macro, defined_in](Interpreter& in, CallArgs& args) {
                return in.call_macro(*macro, defined_in, args);
              }));
}

Value Interpreter::call_macro(const Node& macro, const std::weak_ptr<Scope>& defined_in,
                              CallArgs& args) {
  std::shared_ptr<Scope> parent = defined_in.lock();
  if (!parent) render_fail("macro '{}' called after its scope ended", macro.text);
  const auto& params = macro.params;
  if (args.positional.size() > params.size()) {
    render_fail("macro '{}' takes not more than {} argument(s)", macro.text, params.size());
  }
  for (const auto& [key, v] : args.keyword) {
    const auto it = std::find(params.begin(), params.end(), key);
    if (it == params.end())
      render_fail("macro '{}' takes no keyword argument '{}'", macro.text, key);
    if (static_cast<size_t>(it - params.begin()) < args.positional.size()) {
      render_fail("macro '{}' got multiple values for argument '{}'", macro.text, key);
    }
  }
  ScopeSwap call_scope(*this, std::move(parent));
  const int saved_line = line_;
  for (size_t i = 0; i < params.size(); ++i) {
    Value v;
    if (i < args.positional.size()) {
      v = args.positional[i];
    } else {
      const auto kw = std::find_if(args.keyword.begin(), args.keyword.end(),
                                   [&](const auto& p) { return p.first == params[i]; });
      if (kw != args.keyword.end()) {
        v = kw->second;
      } else if (macro.exprs[i]) {
        v = eval(*macro.exprs[i]);  // defaults may use earlier parameters
      } else {
        v = Value::undefined(fmt::format("parameter '{}' was not provided", params[i]));
      }
    }
    scope_->set(params[i], std::move(v));
  }
  Value result(capture(macro.body));
  line_ = saved_line;
  return result;
}

Value Interpreter::apply_filter_chain(const Expr* chain, Value input) {
  if (chain == nullptr) return input;
  // The chain nests outward; the innermost filter (null operand) applies first.
  Value inner = apply_filter_chain(chain->operands[0].get(), std::move(input));
  line_ = chain->line;
  CallArgs args = eval_args(*chain, 1);
  return apply_filter(*this, chain->name, inner, args);
}

void Interpreter::assign(const Target& target, const Value& value) {
  if (!target.attr.empty()) {
    const Value* ns = scope_->find(target.name);
    if (ns == nullptr || !ns->is_namespace()) {
      render_fail("cannot assign attribute '{}' on '{}', which is not a namespace()", target.attr,
                  target.name);
    }
    ns->as_namespace().attrs.set(Value(target.attr), value);
    return;
  }
  if (!target.is_tuple) {
    scope_->set(target.name, value);
    return;
  }
  const std::vector<Value> items = iterate(value);
  if (items.size() != target.items.size()) {
    if (items.size() > target.items.size()) {
      render_fail("too many values to unpack (expected {})", target.items.size());
    }
    render_fail("not enough values to unpack (expected {}, got {})", target.items.size(),
                items.size());
  }
  for (size_t i = 0; i < items.size(); ++i) assign(target.items[i], items[i]);
}

// ---- expressions --------------------------------------------------------------------------------

Value Interpreter::lookup(const std::string& name) const {
  const Value* v = scope_->find(name);
  return v ? *v : Value::undefined(fmt::format("'{}' is undefined", name));
}

CallArgs Interpreter::eval_args(const Expr& e, size_t first) {
  CallArgs args;
  for (size_t i = first; i < e.operands.size(); ++i)
    args.positional.push_back(eval(*e.operands[i]));
  for (const auto& [k, v] : e.kwargs) args.keyword.emplace_back(k, eval(*v));
  return args;
}

Value Interpreter::eval(const Expr& e) {
  DepthGuard guard(*this);
  charge(1);
  line_ = e.line;
  switch (e.kind) {
    case ExprKind::kLiteral:
      return e.literal;
    case ExprKind::kName:
      return lookup(e.name);
    case ExprKind::kAttr:
      return get_attr(eval(*e.operands[0]), e.name);
    case ExprKind::kItem: {
      const Value obj = eval(*e.operands[0]);
      return get_item(obj, eval(*e.operands[1]));
    }
    case ExprKind::kSlice:
      return eval_slice(e);
    case ExprKind::kCall:
      return eval_call(e);
    case ExprKind::kFilter: {
      const Value input = eval(*e.operands[0]);
      CallArgs args = eval_args(e, 1);
      line_ = e.line;
      return apply_filter(*this, e.name, input, args);
    }
    case ExprKind::kTest: {
      const Value input = eval(*e.operands[0]);
      CallArgs args = eval_args(e, 1);
      line_ = e.line;
      return Value(apply_test(*this, e.name, input, args));
    }
    case ExprKind::kNot:
      return Value(!truthy(eval(*e.operands[0])));
    case ExprKind::kNeg:
    case ExprKind::kPos: {
      const Value v = eval(*e.operands[0]);
      const char* op = e.kind == ExprKind::kNeg ? "-" : "+";
      if (v.is_undefined()) render_fail("{}", v.undefined_reason());
      if (!v.is_number()) render_fail("bad operand type for unary {}: '{}'", op, type_name(v));
      if (e.kind == ExprKind::kPos) return v.is_bool() ? Value(v.as_integral()) : v;
      if (v.is_float()) return Value(-v.as_float());
      if (v.as_integral() == INT64_MIN) render_fail("integer overflow");
      return Value(-v.as_integral());
    }
    case ExprKind::kAnd: {
      Value a = eval(*e.operands[0]);
      return truthy(a) ? eval(*e.operands[1]) : a;
    }
    case ExprKind::kOr: {
      Value a = eval(*e.operands[0]);
      return truthy(a) ? a : eval(*e.operands[1]);
    }
    case ExprKind::kBinary: {
      const Value a = eval(*e.operands[0]);
      const Value b = eval(*e.operands[1]);
      line_ = e.line;
      return binary_op(*this, e.binary_op, a, b);
    }
    case ExprKind::kConcat: {
      std::string s;
      for (const auto& op : e.operands) {
        s += to_str(eval(*op));
        check_string_size(s.size());
      }
      charge(static_cast<int64_t>(s.size() / 64));
      return Value(std::move(s));
    }
    case ExprKind::kCompare:
      return eval_compare(e);
    case ExprKind::kCondExpr:
      if (truthy(eval(*e.operands[1]))) return eval(*e.operands[0]);
      if (e.operands[2]) return eval(*e.operands[2]);
      return Value::undefined(
          fmt::format("the inline if-expression on line {} evaluated to false and no else "
                      "section was defined",
                      e.line));
    case ExprKind::kList:
    case ExprKind::kTuple: {
      std::vector<Value> items;
      items.reserve(e.operands.size());
      for (const auto& op : e.operands) items.push_back(eval(*op));
      return Value::list(std::move(items), e.kind == ExprKind::kTuple);
    }
    case ExprKind::kDict: {
      Dict d;
      for (size_t i = 0; i + 1 < e.operands.size(); i += 2) {
        Value k = eval(*e.operands[i]);
        d.set(std::move(k), eval(*e.operands[i + 1]));
      }
      return Value::dict(std::move(d));
    }
  }
  render_fail("internal: unknown expression kind");
}

Value Interpreter::eval_call(const Expr& e) {
  const Expr& callee = *e.operands[0];
  if (callee.kind == ExprKind::kAttr) {
    // obj.method(...) runs the method directly rather than building a bound method first.
    const Value obj = eval(*callee.operands[0]);
    if (obj.is_undefined()) render_fail("{}", obj.undefined_reason());
    CallArgs args = eval_args(e, 1);
    line_ = e.line;
    Value result;
    if (call_method(*this, obj, callee.name, args, result)) return result;
    return call(get_attr(obj, callee.name), args);
  }
  const Value f = eval(callee);
  CallArgs args = eval_args(e, 1);
  line_ = e.line;
  return call(f, args);
}

Value Interpreter::eval_slice(const Expr& e) {
  // jinja2 slices with Python's own subscription, outside the sandbox's getitem: what Python
  // refuses raises here.
  const Value obj = eval(*e.operands[0]);
  Value parts[3] = {Value::none(), Value::none(), Value::none()};
  for (int k = 0; k < 3; ++k) {
    if (e.operands[k + 1]) parts[k] = eval(*e.operands[k + 1]);
  }
  line_ = e.line;
  if (obj.is_undefined()) render_fail("{}", obj.undefined_reason());
  if (!(obj.is_list() || obj.is_string())) {
    render_fail("'{}' object is not subscriptable", type_name(obj));
  }
  for (const Value& part : parts) {
    if (!part.is_integral() && !part.is_none()) {
      render_fail("slice indices must be integers or None or have an __index__ method");
    }
  }
  if (obj.is_string()) {
    const std::string& s = obj.as_string();
    const CodePointOffsets off(s);
    const SliceIndices slice =
        slice_indices(static_cast<int64_t>(off.count()), parts[0], parts[1], parts[2]);
    std::string out;
    if (slice.step == 1) {  // one run of bytes: s[1:], s[:-1], s[a:b]
      if (slice.start < slice.stop) {
        const size_t a = off[static_cast<size_t>(slice.start)];
        out.assign(s, a, off[static_cast<size_t>(slice.stop)] - a);
      }
      charge(static_cast<int64_t>(out.size() / 16));
      return Value(std::move(out));
    }
    const auto pos = slice.positions();
    for (size_t p : pos) out.append(s, off[p], off[p + 1] - off[p]);
    charge(static_cast<int64_t>(pos.size() / 16));
    return Value(std::move(out));
  }
  const auto& items = obj.as_list().items;
  const auto pos =
      slice_indices(static_cast<int64_t>(items.size()), parts[0], parts[1], parts[2]).positions();
  std::vector<Value> out;
  out.reserve(pos.size());
  for (size_t p : pos) out.push_back(items[p]);
  charge(static_cast<int64_t>(pos.size()));
  return Value::list(std::move(out), obj.is_tuple());
}

Value Interpreter::eval_compare(const Expr& e) {
  Value left = eval(*e.operands[0]);
  for (size_t i = 0; i < e.compare_ops.size(); ++i) {
    Value right = eval(*e.operands[i + 1]);
    line_ = e.line;
    bool ok = false;
    switch (e.compare_ops[i]) {
      case CompareOp::kEq:
        ok = equal(left, right);
        break;
      case CompareOp::kNe:
        ok = !equal(left, right);
        break;
      case CompareOp::kLt:
        ok = less(left, right);
        break;
      case CompareOp::kGt:
        ok = less(right, left);
        break;
      case CompareOp::kLe:
        ok = less(left, right) || equal(left, right);
        break;
      case CompareOp::kGe:
        ok = less(right, left) || equal(left, right);
        break;
      case CompareOp::kIn:
        ok = contains(right, left);
        break;
      case CompareOp::kNotIn:
        ok = !contains(right, left);
        break;
    }
    if (!ok) return Value(false);
    left = std::move(right);
  }
  return Value(true);
}

// ---- object protocol ----------------------------------------------------------------------------

Value Interpreter::call(const Value& callee, CallArgs& args) {
  if (callee.is_function()) {
    charge(1);
    return callee.as_function().call(*this, args);
  }
  if (callee.is_undefined()) render_fail("{}", callee.undefined_reason());
  render_fail("'{}' object is not callable", type_name(callee));
}

Value Interpreter::get_attr(const Value& obj, std::string_view name) {
  // jinja2's sandbox prefers the attribute (a method) and falls back to the item.
  switch (obj.kind()) {
    case Value::Kind::kUndefined:
      render_fail("{}", obj.undefined_reason());
    case Value::Kind::kDict: {
      bool found = false;
      Value method = bound_method(obj, name, found);
      if (found) return method;
      if (const Value* v = obj.as_dict().find(name)) return *v;
      break;
    }
    case Value::Kind::kNamespace:
      if (const Value* v = obj.as_namespace().attrs.find(name)) return *v;
      break;
    case Value::Kind::kString:
    case Value::Kind::kList: {
      bool found = false;
      Value method = bound_method(obj, name, found);
      if (found) return method;
      break;
    }
    default:
      break;
  }
  return missing(obj, Value(name));
}

Value Interpreter::get_item(const Value& obj, const Value& key) {
  // jinja2's sandbox tries the item and falls back to the attribute for string keys; Python's
  // TypeErrors (bad index types, unhashable keys) become undefined.
  switch (obj.kind()) {
    case Value::Kind::kUndefined:
      render_fail("{}", obj.undefined_reason());
    case Value::Kind::kDict:
      if (key.is_list() && !key.is_tuple()) return missing(obj, key);
      if (key.is_dict() || key.is_namespace()) return missing(obj, key);
      if (const Value* v = obj.as_dict().find(key)) return *v;
      break;
    case Value::Kind::kList: {
      if (!key.is_integral()) break;
      const auto& items = obj.as_list().items;
      int64_t i = key.as_integral();
      if (i < 0) i += static_cast<int64_t>(items.size());
      if (i >= 0 && i < static_cast<int64_t>(items.size())) return items[static_cast<size_t>(i)];
      return missing(obj, key);
    }
    case Value::Kind::kString: {
      if (!key.is_integral()) break;
      const std::string& s = obj.as_string();
      const CodePointOffsets off(s);
      int64_t i = key.as_integral();
      const int64_t n = static_cast<int64_t>(off.count());
      if (i < 0) i += n;
      if (i >= 0 && i < n) {
        const size_t k = static_cast<size_t>(i);
        return Value(s.substr(off[k], off[k + 1] - off[k]));
      }
      return missing(obj, key);
    }
    default:
      break;
  }
  if (key.is_string()) return get_attr(obj, key.as_string());
  return missing(obj, key);
}

std::vector<Value> Interpreter::iterate(const Value& v) {
  std::vector<Value> items;
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      break;
    case Value::Kind::kList:
      items = v.as_list().items;
      break;
    case Value::Kind::kDict:
      items.reserve(v.as_dict().entries.size());
      for (const auto& [k, val] : v.as_dict().entries) items.push_back(k);
      break;
    case Value::Kind::kString:
      for (std::string& c : code_points(v.as_string())) items.emplace_back(std::move(c));
      break;
    case Value::Kind::kGenerator:
      if (!v.as_generator().deferred_error.empty())
        render_fail("{}", v.as_generator().deferred_error);
      items = v.as_generator().items;
      break;
    default:
      render_fail("'{}' object is not iterable", type_name(v));
  }
  charge(static_cast<int64_t>(items.size()));
  return items;
}

}  // namespace tf::jinja
