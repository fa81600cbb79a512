#pragma once
// The parsed template: expressions and statements as jinja2's parser builds them, with the same
// precedence and the same desugaring (elif as a nested if, filters and tests as calls).

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "chat/jinja/value.h"

namespace tf::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

enum class ExprKind : uint8_t {
  kLiteral,   // literal
  kName,      // name
  kAttr,      // operands[0].name
  kItem,      // operands[0][operands[1]]
  kSlice,     // operands[0][operands[1]:operands[2]:operands[3]]; absent parts are null
  kCall,      // operands[0](operands[1..], kwargs)
  kFilter,    // operands[0] | name(operands[1..], kwargs); operands[0] null in filter blocks
  kTest,      // operands[0] is name(operands[1..], kwargs)
  kNot,       // not operands[0]
  kNeg,       // -operands[0]
  kPos,       // +operands[0]
  kAnd,       // operands[0] and operands[1]
  kOr,        // operands[0] or operands[1]
  kBinary,    // operands[0] binary_op operands[1]
  kConcat,    // operands[0] ~ operands[1] ~ ...
  kCompare,   // operands[0] compare_ops[0] operands[1] compare_ops[1] operands[2] ...
  kCondExpr,  // operands[0] if operands[1] else operands[2] (null: undefined)
  kList,      // [operands...]
  kTuple,     // (operands...)
  kDict,      // {operands[0]: operands[1], ...}
};

enum class BinaryOp : uint8_t { kAdd, kSub, kMul, kDiv, kFloorDiv, kMod, kPow };
enum class CompareOp : uint8_t { kEq, kNe, kLt, kLe, kGt, kGe, kIn, kNotIn };

struct Expr {
  ExprKind kind;
  int line = 0;
  int depth = 1;  // of the subtree: evaluation recurses this deep
  Value literal;
  std::string name;
  BinaryOp binary_op = BinaryOp::kAdd;
  std::vector<CompareOp> compare_ops;
  std::vector<ExprPtr> operands;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
};

// What {% for %}, {% set %} and {% with %} assign to: a name, `ns.attr`, or a tuple to unpack.
struct Target {
  std::string name;
  std::string attr;  // non-empty: assign the attribute of namespace `name`
  std::vector<Target> items;
  bool is_tuple = false;
};

struct Node;
using NodePtr = std::unique_ptr<Node>;
using Body = std::vector<NodePtr>;

enum class NodeKind : uint8_t {
  kText,      // text
  kPrint,     // {{ exprs[0] }}, {% print exprs... %}
  kIf,        // if exprs[0]: body else: else_body (elif is an if in else_body)
  kFor,       // for targets[0] in exprs[0] [if exprs[1]]: body else: else_body
  kSet,       // set targets[0] = exprs[0]
  kSetBlock,  // set targets[0] [| filter]: body
  kMacro,     // macro text(params = exprs (defaults, null for none)): body
  kBreak,
  kContinue,
  kScope,        // body in a scope of its own ({% generation %})
  kFilterBlock,  // filter chain `filter` applied to the rendered body
  kWith,         // with targets = exprs: body
};

struct Node {
  NodeKind kind;
  int line = 0;
  std::string text;
  std::vector<ExprPtr> exprs;
  std::vector<Target> targets;
  std::vector<std::string> params;
  ExprPtr filter;
  Body body;
  Body else_body;
};

}  // namespace tf::jinja
