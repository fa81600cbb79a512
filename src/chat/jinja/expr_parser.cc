#include "chat/jinja/expr_parser.h"

#include <algorithm>

namespace tf::jinja {

ExprPtr ExprParser::make(ExprKind kind, int line) {
  auto e = std::make_unique<Expr>();
  e->kind = kind;
  e->line = line;
  return e;
}
// Records the subtree depth once the operands are in place; evaluation recurses this deep.
ExprPtr ExprParser::finish(ExprPtr e) const {
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
ExprPtr ExprParser::make_unary(ExprKind kind, int line, ExprPtr operand) const {
  auto e = make(kind, line);
  e->operands.push_back(std::move(operand));
  return finish(std::move(e));
}
ExprPtr ExprParser::make_binary(ExprKind kind, int line, ExprPtr a, ExprPtr b) const {
  auto e = make(kind, line);
  e->operands.push_back(std::move(a));
  e->operands.push_back(std::move(b));
  return finish(std::move(e));
}

Target ExprParser::parse_assign_target(bool with_tuple, bool name_only, EndTags extra_end,
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

Target ExprParser::to_target(const Expr& e) const {
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

ExprPtr ExprParser::parse_expression(bool with_condexpr) {
  return with_condexpr ? parse_condexpr() : parse_or();
}

ExprPtr ExprParser::parse_condexpr() {
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

ExprPtr ExprParser::parse_or() {
  ExprPtr left = parse_and();
  while (cur().is_name("or")) {
    const int line = next().line;
    left = make_binary(ExprKind::kOr, line, std::move(left), parse_and());
  }
  return left;
}

ExprPtr ExprParser::parse_and() {
  ExprPtr left = parse_not();
  while (cur().is_name("and")) {
    const int line = next().line;
    left = make_binary(ExprKind::kAnd, line, std::move(left), parse_not());
  }
  return left;
}

ExprPtr ExprParser::parse_not() {
  if (cur().is_name("not")) {
    NestingGuard guard(*this);
    const int line = next().line;
    return make_unary(ExprKind::kNot, line, parse_not());
  }
  return parse_compare();
}

ExprPtr ExprParser::parse_compare() {
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

ExprPtr ExprParser::binary(BinaryOp op, int line, ExprPtr a, ExprPtr b) const {
  auto e = make(ExprKind::kBinary, line);
  e->binary_op = op;
  e->operands.push_back(std::move(a));
  e->operands.push_back(std::move(b));
  return finish(std::move(e));
}

ExprPtr ExprParser::parse_math1() {
  ExprPtr left = parse_concat();
  while (at_op("+") || at_op("-")) {
    const Token t = next();
    left = binary(t.value == "+" ? BinaryOp::kAdd : BinaryOp::kSub, t.line, std::move(left),
                  parse_concat());
  }
  return left;
}

ExprPtr ExprParser::parse_concat() {
  const int line = cur().line;
  ExprPtr first = parse_math2();
  if (!at_op("~")) return first;
  auto e = make(ExprKind::kConcat, line);
  e->operands.push_back(std::move(first));
  while (skip_op("~")) e->operands.push_back(parse_math2());
  return finish(std::move(e));
}

ExprPtr ExprParser::parse_math2() {
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

ExprPtr ExprParser::parse_pow() {
  ExprPtr left = parse_unary(true);
  while (at_op("**")) {
    const int line = next().line;
    left = binary(BinaryOp::kPow, line, std::move(left), parse_unary(true));
  }
  return left;
}

ExprPtr ExprParser::parse_unary(bool with_filter) {
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

ExprPtr ExprParser::literal(Value v, int line) const {
  auto e = make(ExprKind::kLiteral, line);
  e->literal = std::move(v);
  return e;
}

ExprPtr ExprParser::parse_primary() {
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

bool ExprParser::is_tuple_end(EndTags extra_end) const {
  const Token& t = cur();
  return t.kind == TokenKind::kVariableEnd || t.kind == TokenKind::kBlockEnd || t.is_op(")") ||
         is_end_tag(t, extra_end);
}

ExprPtr ExprParser::parse_tuple(bool simplified, bool with_condexpr, EndTags extra_end,
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

ExprPtr ExprParser::parse_list() {
  auto e = make(ExprKind::kList, next().line);
  while (!at_op("]")) {
    if (!e->operands.empty()) expect_op(",");
    if (at_op("]")) break;
    e->operands.push_back(parse_expression(true));
  }
  expect_op("]");
  return finish(std::move(e));
}

ExprPtr ExprParser::parse_dict() {
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

ExprPtr ExprParser::parse_postfix(ExprPtr node) {
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

ExprPtr ExprParser::parse_filter_expr(ExprPtr node) {
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

ExprPtr ExprParser::parse_subscript(ExprPtr node) {
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

ExprPtr ExprParser::parse_subscribed() {
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

void ExprParser::parse_call_args(Expr& e) {
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

ExprPtr ExprParser::parse_call(ExprPtr node) {
  auto e = make(ExprKind::kCall, cur().line);
  e->operands.push_back(std::move(node));
  parse_call_args(*e);
  return finish(std::move(e));
}

std::string ExprParser::parse_dotted_name() {
  std::string name = expect_name();
  while (skip_op(".")) {
    name += '.';
    name += expect_name();
  }
  return name;
}

ExprPtr ExprParser::parse_filter(ExprPtr node, bool start_inline) {
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

ExprPtr ExprParser::parse_test(ExprPtr node) {
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

}  // namespace tf::jinja
