#pragma once
// Expressions as jinja2's parser reads them (parse_expression down to parse_primary, with the
// same precedence: filters and tests bind tighter than arithmetic, `not` looser than comparisons),
// over the token stream the statement parser shares.

#include <algorithm>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "chat/jinja/ast.h"
#include "chat/jinja/lexer.h"

namespace tf::jinja {

// Nesting limits that keep parsing and rendering off the end of the stack; jinja2 hits Python's
// recursion limit at similar depths.
inline constexpr int kMaxParseNesting = 100;
inline constexpr int kMaxExprDepth = 256;

// Names that end a statement body or an expression list ({"endfor", "else"}, {"in"}).
using EndTags = std::initializer_list<std::string_view>;

class ExprParser {
 public:
  explicit ExprParser(std::vector<Token> tokens) : tokens_(std::move(tokens)) {}

 protected:
  // Counts nesting of recursive grammar rules; past the limit the template is refused.
  class NestingGuard {
   public:
    explicit NestingGuard(ExprParser& p) : p_(p) {
      if (++p_.nesting_ > kMaxParseNesting) {
        p_.fail(p_.cur().line,
                fmt::format("template nests deeper than {} levels", kMaxParseNesting));
      }
    }
    ~NestingGuard() { --p_.nesting_; }

   private:
    ExprParser& p_;
  };

  // ---- the token stream --------------------------------------------------------------------
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

  static bool is_end_tag(const Token& t, EndTags end_tags) {
    return t.kind == TokenKind::kName &&
           std::find(end_tags.begin(), end_tags.end(), t.value) != end_tags.end();
  }

  // ---- what statements parse -----------------------------------------------------------------
  ExprPtr parse_expression(bool with_condexpr);
  // A comma-separated list, a tuple if it has a comma; `simplified` admits only primaries.
  ExprPtr parse_tuple(bool simplified, bool with_condexpr, EndTags extra_end,
                      bool explicit_parentheses);
  ExprPtr parse_primary();
  // `| f(args) | g` applied to node (null for filter blocks); start_inline: no leading pipe.
  ExprPtr parse_filter(ExprPtr node, bool start_inline);
  // The target of for / set / with: a name, `ns.attr` (with_namespace) or a tuple of targets.
  Target parse_assign_target(bool with_tuple, bool name_only, EndTags extra_end,
                             bool with_namespace);

 private:
  static ExprPtr make(ExprKind kind, int line);
  ExprPtr finish(ExprPtr e) const;
  ExprPtr make_unary(ExprKind kind, int line, ExprPtr operand) const;
  ExprPtr make_binary(ExprKind kind, int line, ExprPtr a, ExprPtr b) const;
  ExprPtr binary(BinaryOp op, int line, ExprPtr a, ExprPtr b) const;
  ExprPtr literal(Value v, int line) const;
  Target to_target(const Expr& e) const;

  ExprPtr parse_condexpr();
  ExprPtr parse_or();
  ExprPtr parse_and();
  ExprPtr parse_not();
  ExprPtr parse_compare();
  ExprPtr parse_math1();
  ExprPtr parse_concat();
  ExprPtr parse_math2();
  ExprPtr parse_pow();
  ExprPtr parse_unary(bool with_filter);
  bool is_tuple_end(EndTags extra_end) const;
  ExprPtr parse_list();
  ExprPtr parse_dict();
  ExprPtr parse_postfix(ExprPtr node);
  ExprPtr parse_filter_expr(ExprPtr node);
  ExprPtr parse_subscript(ExprPtr node);
  ExprPtr parse_subscribed();
  void parse_call_args(Expr& e);
  ExprPtr parse_call(ExprPtr node);
  std::string parse_dotted_name();
  ExprPtr parse_test(ExprPtr node);

  std::vector<Token> tokens_;
  size_t pos_ = 0;
  int nesting_ = 0;
};

}  // namespace tf::jinja
