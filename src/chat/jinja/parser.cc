#include "chat/jinja/parser.h"

#include <algorithm>

#include "chat/jinja/builtins.h"
#include "chat/jinja/expr_parser.h"
#include "chat/jinja/lexer.h"

namespace tf::jinja {

namespace {

// Tags jinja2 knows that chat templates have no use for (they need a loader or autoescaping).
constexpr std::string_view kUnsupportedTags[] = {
    "block", "extends",    "include",  "import",  "from",
    "call",  "autoescape", "endblock", "endcall", "endautoescape"};

// Statements ({% for %}, {% if %}, ...) and the template body around them, as jinja2's parser
// reads them.
class StatementParser : public ExprParser {
 public:
  using ExprParser::ExprParser;

  Body parse() { return subparse({}); }

 private:
  struct OpenBlock {
    std::string tag;
    int line;
  };

  static NodePtr make_node(NodeKind kind, int line) {
    auto n = std::make_unique<Node>();
    n->kind = kind;
    n->line = line;
    return n;
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
        if (std::any_of(node->exprs.begin(), node->exprs.end(),
                        [](const auto& e) { return e != nullptr; })) {
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
  Body body = StatementParser(tokenize(source)).parse();
  NameChecker().check(body, false);
  return body;
}

}  // namespace tf::jinja
