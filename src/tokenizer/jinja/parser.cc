#include "tokenizer/jinja/parser.h"

#include <algorithm>
#include <initializer_list>

#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/lexer.h"

namespace tf::jinja {

namespace {

using EndTags = std::initializer_list<std::string_view>;

// Tags jinja2 knows that chat templates have no use for (they need a loader or autoescaping).
constexpr std::string_view kUnsupportedTags[] = {"block",      "extends", "include", "import",
                                                 "from",       "call",    "autoescape",
                                                 "endblock",   "endcall", "endautoescape"};

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : tokens_(std::move(tokens)) {}

  Body parse() { return subparse({}); }

 private:
  // Counts nesting of recursive grammar rules; past the limit the template is refused.
  class NestingGuard {
   public:
    explicit NestingGuard(Parser& p) : p_(p) {
      if (++p_.nesting_ > kMaxParseNesting) {
        p_.fail(p_.cur().line, fmt::format("template nests deeper than {} levels",
                                           kMaxParseNesting));
      }
    }
    ~NestingGuard() { --p_.nesting_; }

   private:
    Parser& p_;
  };

  struct OpenBlock {
    std::string tag;
    int line;
  };

  const Token& cur() const { return tokens_[pos_]; }
  const Token& peek() const { return tokens_[std::min(pos_ + 1, tokens_.size() - 1)]; }
  Token next() {
    Token t = tokens_[pos_];
    if (pos_ + 1 < tokens_.size()) ++pos_;
    return t;
  }
  bool at_op(std::string_view op) const { return cur().is_op(op); }
  bool skip_op(std::string_view op) {
    if (!at_op(op)) return false;
    next();
    return true;
  }
  bool skip_name(std::string_view name) {
    if (!cur().is_name(name)) return false;
    next();
    return true;
  }

  [[noreturn]] void fail(int line, const std::string& what,
                         ErrorKind kind = ErrorKind::kInvalidArgument) const {
    throw TemplateError(kind, fmt::format("{} at line {}", what, line));
  }
  [[noreturn]] void fail_expected(std::string_view what) const {
    fail(cur().line, fmt::format("expected {}, got {}", what, describe(cur())));
  }
  void expect_op(std::string_view op) {
    if (!skip_op(op)) fail_expected(fmt::format("'{}'", op));
  }
  void expect(TokenKind kind, std::string_view what) {
    if (cur().kind != kind) fail_expected(what);
    next();
  }
  std::string expect_name() {
    if (cur().kind != TokenKind::kName) fail_expected("a name");
    return next().value;
  }

  static ExprPtr make(ExprKind kind, int line) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = line;
    return e;
  }
  // Records the subtree depth once the operands are in place; evaluation recurses this deep.
  ExprPtr finish(ExprPtr e) const {
    int d = 0;
    for (const auto& op : e->operands) {
      if (op) d = std::max(d, op->depth);
    }
    for (const auto& [k, v] : e->kwargs) d = std::max(d, v->depth);
    e->depth = d + 1;
    if (e->depth > kMaxExprDepth) {
      fail(e->line, fmt::format("expression nests deeper than {} levels", kMaxExprDepth));
    }
    return e;
  }
  ExprPtr make_unary(ExprKind kind, int line, ExprPtr operand) const {
    auto e = make(kind, line);
    e->operands.push_back(std::move(operand));
    return finish(std::move(e));
  }
  ExprPtr make_binary(ExprKind kind, int line, ExprPtr a, ExprPtr b) const {
    auto e = make(kind, line);
    e->operands.push_back(std::move(a));
    e->operands.push_back(std::move(b));
    return finish(std::move(e));
  }

  // ---- statements ---------------------------------------------------------------------------

  static NodePtr make_node(NodeKind kind, int line) {
    auto n = std::make_unique<Node>();
    n->kind = kind;
    n->line = line;
    return n;
  }

  static bool is_end_tag(const Token& t, EndTags end_tags) {
    return t.kind == TokenKind::kName &&
           std::find(end_tags.begin(), end_tags.end(), t.value) != end_tags.end();
  }

  Body subparse(EndTags end_tags) {
    Body body;
    while (cur().kind != TokenKind::kEof) {
      const Token& t = cur();
      if (t.kind == TokenKind::kData) {
        auto n = make_node(NodeKind::kText, t.line);
        n->text = next().value;
        body.push_back(std::move(n));
      } else if (t.kind == TokenKind::kVariableBegin) {
        auto n = make_node(NodeKind::kPrint, next().line);
        n->exprs.push_back(parse_tuple(false, true, {}, false));
        expect(TokenKind::kVariableEnd, "end of print statement");
        body.push_back(std::move(n));
      } else if (t.kind == TokenKind::kBlockBegin) {
        next();
        if (is_end_tag(cur(), end_tags)) return body;
        body.push_back(parse_statement());
        expect(TokenKind::kBlockEnd, "end of statement block");
      } else {
        fail(t.line, fmt::format("unexpected {}", describe(t)));
      }
    }
    return body;
  }

  Body parse_statements(EndTags end_tags, bool drop_needle) {
    skip_op(":");
    expect(TokenKind::kBlockEnd, "end of statement block");
    Body body = subparse(end_tags);
    if (cur().kind == TokenKind::kEof) {
      std::string wanted;
      for (std::string_view tag : end_tags) {
        wanted += (wanted.empty() ? "'" : " or '") + std::string(tag) + "'";
      }
      const OpenBlock& open = open_blocks_.back();
      fail(cur().line, fmt::format("unexpected end of template: '{}' opened at line {} needs {}",
                                   open.tag, open.line, wanted));
    }
    if (drop_needle) next();
    return body;
  }

  NodePtr parse_statement() {
    NestingGuard guard(*this);
    const Token& t = cur();
    if (t.kind != TokenKind::kName) fail_expected("a tag name");
    const std::string tag = t.value;
    const int line = t.line;
    if (std::find(std::begin(kUnsupportedTags), std::end(kUnsupportedTags), tag) !=
        std::end(kUnsupportedTags)) {
      fail(line, fmt::format("unsupported tag '{}'", tag), ErrorKind::kUnsupported);
    }
    open_blocks_.push_back({tag, line});
    NodePtr node;
    if (tag == "for") {
      node = parse_for();
    } else if (tag == "if") {
      node = parse_if();
    } else if (tag == "set") {
      node = parse_set();
    } else if (tag == "macro") {
      node = parse_macro();
    } else if (tag == "print") {
      node = parse_print();
    } else if (tag == "with") {
      node = parse_with();
    } else if (tag == "filter") {
      node = make_node(NodeKind::kFilterBlock, next().line);
      node->filter = parse_filter(nullptr, true);
      node->body = parse_body_in_new_frame({"endfilter"});
    } else if (tag == "generation") {
      // transformers' {% generation %} marks assistant text; rendering is unaffected.
      node = make_node(NodeKind::kScope, next().line);
      node->body = parse_body_in_new_frame({"endgeneration"}, /*resets_loops=*/true);
    } else if (tag == "break" || tag == "continue") {
      next();
      if (loop_depth_ == 0) fail(line, fmt::format("'{}' outside of a loop", tag));
      node = make_node(tag == "break" ? NodeKind::kBreak : NodeKind::kContinue, line);
    } else {
      open_blocks_.pop_back();
      fail_unknown_tag(tag, line);
    }
    open_blocks_.pop_back();
    return node;
  }

  [[noreturn]] void fail_unknown_tag(const std::string& tag, int line) const {
    const bool is_closer = tag.rfind("end", 0) == 0 || tag == "else" || tag == "elif";
    if (!is_closer) fail(line, fmt::format("unknown tag '{}'", tag), ErrorKind::kUnsupported);
    if (open_blocks_.empty()) fail(line, fmt::format("unexpected '{}': no block is open", tag));
    const OpenBlock& open = open_blocks_.back();
    fail(line, fmt::format("unexpected '{}': the innermost open block is '{}' from line {}", tag,
                           open.tag, open.line));
  }

  Body parse_body_in_new_frame(EndTags end_tags, bool resets_loops = false) {
    const int saved = loop_depth_;
    if (resets_loops) loop_depth_ = 0;
    Body body = parse_statements(end_tags, true);
    loop_depth_ = saved;
    return body;
  }

  NodePtr parse_for() {
    auto node = make_node(NodeKind::kFor, next().line);
    node->targets.push_back(parse_assign_target(true, false, {"in"}, false));
    if (!skip_name("in")) fail_expected("'in'");
    node->exprs.push_back(parse_tuple(false, false, {"recursive"}, false));
    if (skip_name("if")) {
      node->exprs.push_back(parse_expression(true));
    }
    if (cur().is_name("recursive")) {
      fail(cur().line, "unsupported recursive for loop", ErrorKind::kUnsupported);
    }
    ++loop_depth_;
    node->body = parse_statements({"endfor", "else"}, false);
    --loop_depth_;
    if (next().value != "endfor") node->else_body = parse_statements({"endfor"}, true);
    return node;
  }

  NodePtr parse_if() {
    auto root = make_node(NodeKind::kIf, next().line);
    Node* node = root.get();
    while (true) {
      node->exprs.push_back(parse_tuple(false, false, {}, false));
      node->body = parse_statements({"elif", "else", "endif"}, false);
      const Token t = next();
      if (t.is_name("elif")) {
        auto elif = make_node(NodeKind::kIf, cur().line);
        Node* raw = elif.get();
        node->else_body.push_back(std::move(elif));
        node = raw;
        continue;
      }
      if (t.is_name("else")) node->else_body = parse_statements({"endif"}, true);
      break;
    }
    return root;
  }

  NodePtr parse_set() {
    const int line = next().line;
    Target target = parse_assign_target(true, false, {}, true);
    if (skip_op("=")) {
      auto node = make_node(NodeKind::kSet, line);
      node->targets.push_back(std::move(target));
      node->exprs.push_back(parse_tuple(false, true, {}, false));
      return node;
    }
    auto node = make_node(NodeKind::kSetBlock, line);
    node->targets.push_back(std::move(target));
    node->filter = parse_filter(nullptr, false);
    node->body = parse_body_in_new_frame({"endset"});
    return node;
  }

  NodePtr parse_macro() {
    auto node = make_node(NodeKind::kMacro, next().line);
    node->text = expect_name();
    expect_op("(");
    while (!at_op(")")) {
      if (!node->params.empty()) expect_op(",");
      node->params.push_back(expect_name());
      if (skip_op("=")) {
        node->exprs.push_back(parse_expression(true));
      } else {
        if (std::any_of(node->exprs.begin(), node->exprs.end(), [](const auto& e) { return e != nullptr; })) {
          fail(cur().line, "non-default argument follows default argument");
        }
        node->exprs.push_back(nullptr);
      }
    }
    expect_op(")");
    node->body = parse_body_in_new_frame({"endmacro"}, /*resets_loops=*/true);
    return node;
  }

  NodePtr parse_print() {
    auto node = make_node(NodeKind::kPrint, next().line);
    while (cur().kind != TokenKind::kBlockEnd) {
      if (!node->exprs.empty()) expect_op(",");
      node->exprs.push_back(parse_expression(true));
    }
    return node;
  }

  NodePtr parse_with() {
    auto node = make_node(NodeKind::kWith, next().line);
    while (cur().kind != TokenKind::kBlockEnd) {
      if (!node->targets.empty()) expect_op(",");
      node->targets.push_back(parse_assign_target(true, false, {}, false));
      expect_op("=");
      node->exprs.push_back(parse_expression(true));
    }
    node->body = parse_body_in_new_frame({"endwith"});
    return node;
  }

  Target parse_assign_target(bool with_tuple, bool name_only, EndTags extra_end,
                             bool with_namespace) {
    if (with_namespace && cur().kind == TokenKind::kName && peek().is_op(".")) {
      Target t;
      t.name = next().value;
      next();
      t.attr = expect_name();
      return t;
    }
    if (name_only) return Target{expect_name(), {}, {}, false};
    const ExprPtr e = with_tuple ? parse_tuple(true, true, extra_end, false) : parse_primary();
    return to_target(*e);
  }

  Target to_target(const Expr& e) const {
    Target t;
    if (e.kind == ExprKind::kName) {
      t.name = e.name;
    } else if (e.kind == ExprKind::kTuple) {
      t.is_tuple = true;
      for (const auto& item : e.operands) t.items.push_back(to_target(*item));
    } else {
      fail(e.line, "can't assign to this expression");
    }
    return t;
  }

  // ---- expressions ----------------------------------------------------------------------------

  ExprPtr parse_expression(bool with_condexpr) {
    return with_condexpr ? parse_condexpr() : parse_or();
  }

  ExprPtr parse_condexpr() {
    const int line = cur().line;
    ExprPtr e = parse_or();
    while (skip_name("if")) {
      auto cond = make(ExprKind::kCondExpr, line);
      cond->operands.push_back(std::move(e));
      cond->operands.push_back(parse_or());
      cond->operands.push_back(skip_name("else") ? parse_condexpr() : nullptr);
      e = finish(std::move(cond));
    }
    return e;
  }

  ExprPtr parse_or() {
    ExprPtr left = parse_and();
    while (cur().is_name("or")) {
      const int line = next().line;
      left = make_binary(ExprKind::kOr, line, std::move(left), parse_and());
    }
    return left;
  }

  ExprPtr parse_and() {
    ExprPtr left = parse_not();
    while (cur().is_name("and")) {
      const int line = next().line;
      left = make_binary(ExprKind::kAnd, line, std::move(left), parse_not());
    }
    return left;
  }

  ExprPtr parse_not() {
    if (cur().is_name("not")) {
      NestingGuard guard(*this);
      const int line = next().line;
      return make_unary(ExprKind::kNot, line, parse_not());
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    const int line = cur().line;
    ExprPtr first = parse_math1();
    auto cmp = make(ExprKind::kCompare, line);
    while (true) {
      static constexpr std::pair<std::string_view, CompareOp> kOps[] = {
          {"==", CompareOp::kEq}, {"!=", CompareOp::kNe}, {"<", CompareOp::kLt},
          {"<=", CompareOp::kLe}, {">", CompareOp::kGt},  {">=", CompareOp::kGe}};
      const auto* op = std::find_if(std::begin(kOps), std::end(kOps),
                                    [&](const auto& o) { return at_op(o.first); });
      if (op != std::end(kOps)) {
        next();
        cmp->compare_ops.push_back(op->second);
      } else if (skip_name("in")) {
        cmp->compare_ops.push_back(CompareOp::kIn);
      } else if (cur().is_name("not") && peek().is_name("in")) {
        next();
        next();
        cmp->compare_ops.push_back(CompareOp::kNotIn);
      } else {
        break;
      }
      if (cmp->operands.empty()) cmp->operands.push_back(std::move(first));
      cmp->operands.push_back(parse_math1());
    }
    if (cmp->compare_ops.empty()) return first;
    return finish(std::move(cmp));
  }

  ExprPtr binary(BinaryOp op, int line, ExprPtr a, ExprPtr b) const {
    auto e = make(ExprKind::kBinary, line);
    e->binary_op = op;
    e->operands.push_back(std::move(a));
    e->operands.push_back(std::move(b));
    return finish(std::move(e));
  }

  ExprPtr parse_math1() {
    ExprPtr left = parse_concat();
    while (at_op("+") || at_op("-")) {
      const Token t = next();
      left = binary(t.value == "+" ? BinaryOp::kAdd : BinaryOp::kSub, t.line, std::move(left),
                    parse_concat());
    }
    return left;
  }

  ExprPtr parse_concat() {
    const int line = cur().line;
    ExprPtr first = parse_math2();
    if (!at_op("~")) return first;
    auto e = make(ExprKind::kConcat, line);
    e->operands.push_back(std::move(first));
    while (skip_op("~")) e->operands.push_back(parse_math2());
    return finish(std::move(e));
  }

  ExprPtr parse_math2() {
    ExprPtr left = parse_pow();
    while (at_op("*") || at_op("/") || at_op("//") || at_op("%")) {
      const Token t = next();
      const BinaryOp op = t.value == "*"    ? BinaryOp::kMul
                          : t.value == "/"  ? BinaryOp::kDiv
                          : t.value == "//" ? BinaryOp::kFloorDiv
                                            : BinaryOp::kMod;
      left = binary(op, t.line, std::move(left), parse_pow());
    }
    return left;
  }

  ExprPtr parse_pow() {
    ExprPtr left = parse_unary(true);
    while (at_op("**")) {
      const int line = next().line;
      left = binary(BinaryOp::kPow, line, std::move(left), parse_unary(true));
    }
    return left;
  }

  ExprPtr parse_unary(bool with_filter) {
    NestingGuard guard(*this);
    const int line = cur().line;
    ExprPtr node;
    if (skip_op("-")) {
      node = make_unary(ExprKind::kNeg, line, parse_unary(false));
    } else if (skip_op("+")) {
      node = make_unary(ExprKind::kPos, line, parse_unary(false));
    } else {
      node = parse_primary();
    }
    node = parse_postfix(std::move(node));
    if (with_filter) node = parse_filter_expr(std::move(node));
    return node;
  }

  ExprPtr literal(Value v, int line) const {
    auto e = make(ExprKind::kLiteral, line);
    e->literal = std::move(v);
    return e;
  }

  ExprPtr parse_primary() {
    const Token& t = cur();
    switch (t.kind) {
      case TokenKind::kName: {
        const Token name = next();
        if (name.value == "true" || name.value == "True") return literal(Value(true), name.line);
        if (name.value == "false" || name.value == "False") {
          return literal(Value(false), name.line);
        }
        if (name.value == "none" || name.value == "None") return literal(Value::none(), name.line);
        auto e = make(ExprKind::kName, name.line);
        e->name = name.value;
        return e;
      }
      case TokenKind::kString: {
        const int line = t.line;
        std::string s;
        while (cur().kind == TokenKind::kString) s += next().value;  // adjacent strings join
        return literal(Value(std::move(s)), line);
      }
      case TokenKind::kInteger:
        return literal(Value(t.int_value), next().line);
      case TokenKind::kFloat:
        return literal(Value(t.float_value), next().line);
      default:
        break;
    }
    if (at_op("(")) {
      next();
      ExprPtr e = parse_tuple(false, true, {}, true);
      expect_op(")");
      return e;
    }
    if (at_op("[")) return parse_list();
    if (at_op("{")) return parse_dict();
    fail(t.line, fmt::format("unexpected {}", describe(t)));
  }

  bool is_tuple_end(EndTags extra_end) const {
    const Token& t = cur();
    return t.kind == TokenKind::kVariableEnd || t.kind == TokenKind::kBlockEnd || t.is_op(")") ||
           is_end_tag(t, extra_end);
  }

  ExprPtr parse_tuple(bool simplified, bool with_condexpr, EndTags extra_end,
                      bool explicit_parentheses) {
    const int line = cur().line;
    auto tuple = make(ExprKind::kTuple, line);
    bool is_tuple = false;
    while (true) {
      if (!tuple->operands.empty()) expect_op(",");
      if (is_tuple_end(extra_end)) break;
      tuple->operands.push_back(simplified ? parse_primary() : parse_expression(with_condexpr));
      if (at_op(",")) {
        is_tuple = true;
      } else {
        break;
      }
    }
    if (!is_tuple) {
      if (!tuple->operands.empty()) return std::move(tuple->operands[0]);
      if (!explicit_parentheses) fail_expected("an expression");
    }
    return finish(std::move(tuple));
  }

  ExprPtr parse_list() {
    auto e = make(ExprKind::kList, next().line);
    while (!at_op("]")) {
      if (!e->operands.empty()) expect_op(",");
      if (at_op("]")) break;
      e->operands.push_back(parse_expression(true));
    }
    expect_op("]");
    return finish(std::move(e));
  }

  ExprPtr parse_dict() {
    auto e = make(ExprKind::kDict, next().line);
    while (!at_op("}")) {
      if (!e->operands.empty()) expect_op(",");
      if (at_op("}")) break;
      e->operands.push_back(parse_expression(true));
      expect_op(":");
      e->operands.push_back(parse_expression(true));
    }
    expect_op("}");
    return finish(std::move(e));
  }

  ExprPtr parse_postfix(ExprPtr node) {
    while (true) {
      if (at_op(".") || at_op("[")) {
        node = parse_subscript(std::move(node));
      } else if (at_op("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  ExprPtr parse_filter_expr(ExprPtr node) {
    while (true) {
      if (at_op("|")) {
        node = parse_filter(std::move(node), false);
      } else if (cur().is_name("is")) {
        node = parse_test(std::move(node));
      } else if (at_op("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr node) {
    const Token t = next();
    if (t.value == ".") {
      const Token attr = next();
      if (attr.kind == TokenKind::kName) {
        auto e = make(ExprKind::kAttr, t.line);
        e->name = attr.value;
        e->operands.push_back(std::move(node));
        return finish(std::move(e));
      }
      if (attr.kind != TokenKind::kInteger) fail(attr.line, "expected name or number after '.'");
      return make_binary(ExprKind::kItem, t.line, std::move(node),
                         literal(Value(attr.int_value), attr.line));
    }
    std::vector<ExprPtr> args;
    while (!at_op("]")) {
      if (!args.empty()) expect_op(",");
      args.push_back(parse_subscribed());
    }
    expect_op("]");
    if (args.size() == 1 && args[0]->kind == ExprKind::kSlice) {
      args[0]->operands[0] = std::move(node);
      return finish(std::move(args[0]));
    }
    ExprPtr key;
    if (args.size() == 1) {
      key = std::move(args[0]);
    } else {
      auto tuple = make(ExprKind::kTuple, t.line);
      for (auto& a : args) {
        if (a->kind == ExprKind::kSlice) {
          fail(t.line, "unsupported multi-dimensional slice", ErrorKind::kUnsupported);
        }
        tuple->operands.push_back(std::move(a));
      }
      key = finish(std::move(tuple));
    }
    return make_binary(ExprKind::kItem, t.line, std::move(node), std::move(key));
  }

  ExprPtr parse_subscribed() {
    auto slice = make(ExprKind::kSlice, cur().line);
    slice->operands.push_back(nullptr);  // the sliced object, filled in by the caller
    if (skip_op(":")) {
      slice->operands.push_back(nullptr);
    } else {
      ExprPtr e = parse_expression(true);
      if (!skip_op(":")) return e;
      slice->operands.push_back(std::move(e));
    }
    const auto at_end = [&] { return at_op("]") || at_op(","); };
    if (at_op(":") || at_end()) {
      slice->operands.push_back(nullptr);
    } else {
      slice->operands.push_back(parse_expression(true));
    }
    if (skip_op(":") && !at_end()) {
      slice->operands.push_back(parse_expression(true));
    } else {
      slice->operands.push_back(nullptr);
    }
    return slice;
  }

  void parse_call_args(Expr& e) {
    const int line = cur().line;
    expect_op("(");
    bool require_comma = false;
    while (!at_op(")")) {
      if (require_comma) {
        expect_op(",");
        if (at_op(")")) break;
      }
      if (at_op("*") || at_op("**")) {
        fail(line, "unsupported *args or **kwargs in a call", ErrorKind::kUnsupported);
      }
      if (cur().kind == TokenKind::kName && peek().is_op("=")) {
        std::string key = next().value;
        next();
        for (const auto& [k, v] : e.kwargs) {
          if (k == key) fail(line, fmt::format("keyword argument '{}' repeated", key));
        }
        e.kwargs.emplace_back(std::move(key), parse_expression(true));
      } else {
        if (!e.kwargs.empty()) fail(line, "positional argument follows keyword argument");
        e.operands.push_back(parse_expression(true));
      }
      require_comma = true;
    }
    expect_op(")");
  }

  ExprPtr parse_call(ExprPtr node) {
    auto e = make(ExprKind::kCall, cur().line);
    e->operands.push_back(std::move(node));
    parse_call_args(*e);
    return finish(std::move(e));
  }

  std::string parse_dotted_name() {
    std::string name = expect_name();
    while (skip_op(".")) {
      name += '.';
      name += expect_name();
    }
    return name;
  }

  ExprPtr parse_filter(ExprPtr node, bool start_inline) {
    while (at_op("|") || start_inline) {
      if (!start_inline) next();
      start_inline = false;
      auto e = make(ExprKind::kFilter, cur().line);
      e->name = parse_dotted_name();
      e->operands.push_back(std::move(node));
      if (at_op("(")) parse_call_args(*e);
      node = finish(std::move(e));
    }
    return node;
  }

  ExprPtr parse_test(ExprPtr node) {
    const int line = next().line;  // 'is'
    const bool negated = skip_name("not");
    auto e = make(ExprKind::kTest, line);
    e->name = parse_dotted_name();
    e->operands.push_back(std::move(node));
    const Token& t = cur();
    if (t.is_op("(")) {
      parse_call_args(*e);
    } else if ((t.kind == TokenKind::kName || t.kind == TokenKind::kString ||
                t.kind == TokenKind::kInteger || t.kind == TokenKind::kFloat || t.is_op("[") ||
                t.is_op("{")) &&
               !t.is_name("else") && !t.is_name("or") && !t.is_name("and")) {
      if (t.is_name("is")) fail(t.line, "you cannot chain multiple tests with 'is'");
      e->operands.push_back(parse_postfix(parse_primary()));
    }
    ExprPtr test = finish(std::move(e));
    return negated ? make_unary(ExprKind::kNot, line, std::move(test)) : std::move(test);
  }

  std::vector<Token> tokens_;
  size_t pos_ = 0;
  int nesting_ = 0;
  int loop_depth_ = 0;
  std::vector<OpenBlock> open_blocks_;
};

// jinja2 reports an unknown filter or test when compiling, unless it sits in an if statement or
// a conditional expression, where the error waits until (and unless) the code runs.
class NameChecker {
 public:
  void check(const Body& body, bool soft) {
    for (const auto& n : body) check(*n, soft);
  }

 private:
  void check(const Node& n, bool soft) {
    switch (n.kind) {
      case NodeKind::kIf:
        for (const auto& e : n.exprs) check(e.get(), true);
        check(n.body, true);
        check(n.else_body, true);
        return;
      case NodeKind::kFor:
        check(n.exprs[0].get(), soft);
        if (n.exprs.size() > 1) check(n.exprs[1].get(), false);
        check(n.body, false);
        check(n.else_body, false);
        return;
      case NodeKind::kWith:
        for (const auto& e : n.exprs) check(e.get(), soft);
        check(n.body, false);
        return;
      default:
        for (const auto& e : n.exprs) check(e.get(), n.kind == NodeKind::kMacro ? false : soft);
        check(n.filter.get(), false);
        check(n.body, false);
        check(n.else_body, false);
    }
  }

  void check(const Expr* e, bool soft) {
    if (e == nullptr) return;
    if (e->kind == ExprKind::kCondExpr) soft = true;
    if (!soft && e->kind == ExprKind::kFilter && !is_known_filter(e->name)) {
      throw TemplateError(ErrorKind::kUnsupported,
                          fmt::format("unknown filter '{}' at line {}", e->name, e->line));
    }
    if (!soft && e->kind == ExprKind::kTest && !is_known_test(e->name)) {
      throw TemplateError(ErrorKind::kUnsupported,
                          fmt::format("unknown test '{}' at line {}", e->name, e->line));
    }
    for (const auto& op : e->operands) check(op.get(), soft);
    for (const auto& [k, v] : e->kwargs) check(v.get(), soft);
  }
};

}  // namespace

Body parse_template(std::string_view source) {
  Body body = Parser(tokenize(source)).parse();
  NameChecker().check(body, false);
  return body;
}

}  // namespace tf::jinja
