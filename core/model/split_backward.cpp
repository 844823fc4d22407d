// Split backward over the autograd graph itself (LibTorch's engine, driven edge by edge):
// which nodes lie on the path to the input, which hang off it as weight branches, and one
// engine call for I plus one per weight branch for W.
#include "core/model/split_backward.hpp"

#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/accumulate_grad.h>
#include <torch/csrc/autograd/variable.h>

#include <stdexcept>
#include <unordered_map>
#include <utility>

namespace actorpipe {
namespace {

using torch::autograd::Edge;
using torch::autograd::edge_list;
using torch::autograd::Node;

// An owning handle to a node we only hold a raw pointer to: shared_ptr in LibTorch 1.x,
// intrusive_ptr (getptr) in later ones.
template <class N>
auto owning(N* n, int) -> decltype(n->getptr()) {
  return n->getptr();
}
template <class N>
auto owning(N* n, long) -> decltype(n->shared_from_this()) {
  return n->shared_from_this();
}
Edge edge_into(Node* n, std::uint32_t input_nr) { return Edge(owning(n, 0), input_nr); }

// For every node reachable from `root`: does it lead to `target` (the input's leaf)? An
// iterative post-order walk: chunks can be deep chains, too deep for recursion.
std::unordered_map<Node*, bool> nodes_reaching(Node* root, Node* target) {
  std::unordered_map<Node*, bool> reaches;
  std::vector<std::pair<Node*, std::size_t>> stack;
  reaches[root] = root == target;
  stack.emplace_back(root, 0);
  while (!stack.empty()) {
    auto& [node, next] = stack.back();
    if (node != target && next < node->num_outputs()) {
      const Edge& e = node->next_edge(next++);
      Node* child = e.function.get();
      if (child && !reaches.count(child)) {
        reaches[child] = child == target;
        stack.emplace_back(child, 0);
      }
      continue;
    }
    Node* done = node;
    stack.pop_back();
    bool r = reaches[done];
    for (const Edge& e : done->next_edges())
      if (e.function && reaches[e.function.get()]) r = true;
    reaches[done] = r;
  }
  return reaches;
}

}  // namespace

void deferred_weight_pass::run() {
  auto calls = std::move(calls_);
  calls_.clear();
  auto& engine = torch::autograd::Engine::get_default_engine();
  for (auto& c : calls) {
    // accumulate_grad with `leaves`: only paths into those leaves run, so the node at the top
    // computes its weight outputs and not again its input-path one.
    engine.execute(c.roots, c.grads, /*keep_graph=*/true, /*create_graph=*/false, /*accumulate_grad=*/true, c.leaves);
  }
}

at::Tensor input_grad_pass(const at::Tensor& output, const at::Tensor& grad_output, const at::Tensor& input,
                           deferred_weight_pass& weights) {
  weights.calls_.clear();
  const at::Tensor g = grad_output.defined() ? grad_output : at::ones_like(output);
  const Edge root = torch::autograd::impl::gradient_edge(output);
  if (!root.is_valid()) throw std::invalid_argument("backward: the chunk's output does not require grad");
  const bool want_input = input.defined() && input.requires_grad();
  const Edge in_edge = want_input ? torch::autograd::impl::gradient_edge(input) : Edge();
  Node* target = want_input ? in_edge.function.get() : nullptr;

  const auto reaches = nodes_reaching(root.function.get(), target);
  if (!reaches.at(root.function.get())) {
    // Nothing to hand back (a first stage, or an output that ignores its input): all of the
    // backward is W.
    weights.calls_.push_back({{root}, {g}, {}});
    return at::Tensor();
  }

  // Weight branches: children off the input path of nodes on it. Each is walked to its
  // leaves; a node seen from two tops means the branches overlap.
  struct branch {
    Node* top;
    edge_list leaves;
  };
  std::vector<branch> branches;
  std::unordered_map<Node*, Node*> owner;  // weight-side node -> its branch's top
  bool overlap = false;
  {
    std::vector<Node*> order;  // input-path nodes, parents before children
    std::unordered_map<Node*, bool> seen;
    std::vector<Node*> stack{root.function.get()};
    while (!stack.empty()) {
      Node* n = stack.back();
      stack.pop_back();
      if (seen[n]) continue;
      seen[n] = true;
      if (n == target) continue;
      order.push_back(n);
      const auto& edges = n->next_edges();
      for (auto it = edges.rbegin(); it != edges.rend(); ++it)
        if (it->function && reaches.at(it->function.get())) stack.push_back(it->function.get());
    }
    for (Node* top : order) {
      branch b{top, {}};
      std::vector<Node*> walk;
      for (const Edge& e : top->next_edges())
        if (e.function && !reaches.at(e.function.get())) walk.push_back(e.function.get());
      while (!walk.empty() && !overlap) {
        Node* n = walk.back();
        walk.pop_back();
        auto [it, fresh] = owner.emplace(n, top);
        if (!fresh) {
          if (it->second != top) overlap = true;
          continue;
        }
        if (dynamic_cast<torch::autograd::AccumulateGrad*>(n)) b.leaves.push_back(edge_into(n, 0));
        for (const Edge& e : n->next_edges())
          if (e.function) walk.push_back(e.function.get());
      }
      if (overlap) break;
      if (!b.leaves.empty()) branches.push_back(std::move(b));
    }
  }
  if (overlap) {
    torch::autograd::backward({output}, {g});
    return want_input ? input.grad() : at::Tensor();
  }

  // I: capture the input's gradient and what arrives at each branch top; the tops run for
  // their input-path outputs only (their weight children are not needed in this pass).
  edge_list outputs{in_edge};
  for (const auto& b : branches)
    for (std::uint32_t k = 0; k < b.top->num_inputs(); ++k) outputs.push_back(edge_into(b.top, k));
  auto& engine = torch::autograd::Engine::get_default_engine();
  const auto captured = engine.execute({root}, {g}, /*keep_graph=*/true, /*create_graph=*/false,
                                       /*accumulate_grad=*/false, outputs);
  std::size_t at = 1;
  for (const auto& b : branches) {
    deferred_weight_pass::call c;
    for (std::uint32_t k = 0; k < b.top->num_inputs(); ++k, ++at) {
      if (!captured[at].defined()) continue;
      c.roots.push_back(edge_into(b.top, k));
      c.grads.push_back(captured[at]);
    }
    if (c.roots.empty()) continue;
    c.leaves = b.leaves;
    weights.calls_.push_back(std::move(c));
  }
  return captured[0];  // undefined where no gradient reached the input
}

}  // namespace actorpipe
