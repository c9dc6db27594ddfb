#include "core/graph/graph.hpp"

#include <algorithm>
#include <unordered_set>

#include "core/unique_ids.hpp"

namespace troupe::core::graph {

namespace {

constexpr size_t npos = static_cast<size_t>(-1);

// What a model file may ask a tensor to be: at most Shape's rank with its batch axis, and
// no more elements per example than kMaxTensorElements (a hostile file's Dense of 2^40
// units is refused here, before any step allocates it).
Status check_spec(const Operation& op, const TensorSpec& s) {
  if (static_cast<int>(s.shape.size()) + 1 > Shape::max_rank)
    return op.error("makes a tensor of rank " + std::to_string(s.shape.size() + 1) +
                    " (with its batch axis); Troupe's tensors have at most " +
                    std::to_string(Shape::max_rank) + " axes");
  if (!fits_elements(s.shape, kMaxTensorElements))
    return op.error("makes a tensor of " + s.to_string() + " per example, over Troupe's limit of " +
                    std::to_string(kMaxTensorElements) + " elements");
  return {};
}

// A per-call seed from the step's: two dropout calls of one step draw different masks.
uint64_t call_seed(uint64_t step_seed, size_t node) {
  uint64_t z = step_seed + 0x9e3779b97f4a7c15ULL * (node + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  return z ^ (z >> 27);
}

std::string names_of(const Batch& batch) {
  std::string out;
  for (const auto& c : batch.columns)
    out += (out.empty() ? "" : ", ") + c.name;
  return out.empty() ? "none" : out;
}

}  // namespace

int Graph::add_input(std::string name, TensorSpec spec) {
  const int id = static_cast<int>(specs_.size());
  specs_.push_back(spec);
  producer_.push_back(-1);
  inputs_.push_back({std::move(name), std::move(spec), id});
  planned_ = false;
  return id;
}

Expected<std::vector<int>> Graph::call(std::shared_ptr<Operation> op,
                                       const std::vector<int>& inputs) {
  std::vector<TensorSpec> in;
  for (int id : inputs) {
    if (id < 0 || id >= static_cast<int>(specs_.size()))
      return op->error("called on a tensor the graph does not have");
    in.push_back(specs_[static_cast<size_t>(id)]);
  }
  const bool first_call = std::find(ops_.begin(), ops_.end(), op) == ops_.end();
  auto out = op->build(in);
  if (!out) return out.error();
  if (!op->weight_status()) return op->weight_status().error();
  for (const auto& s : *out)
    if (auto st = check_spec(*op, s); !st) return st.error();
  if (op->on_host())
    for (int id : inputs) {
      const int p = producer_[static_cast<size_t>(id)];
      if (spec(id).kind == ColumnKind::floats || (p >= 0 && !nodes_[static_cast<size_t>(p)].host))
        return op->error(
            "takes ids or strings straight from the model's inputs or other host operations, got " +
            spec(id).to_string());
    }
  Node node;
  node.op = op;
  node.inputs = inputs;
  node.host = op->on_host();
  for (const auto& s : *out) {
    node.outputs.push_back(static_cast<int>(specs_.size()));
    specs_.push_back(s);
    producer_.push_back(static_cast<int>(nodes_.size()));
  }
  node.state = op->make_state();
  if (first_call) {
    first_weight_.push_back(weights_.size());
    ops_.push_back(op);
    for (size_t i = 0; i < op->weights().size(); ++i)
      weights_.push_back({op.get(), i, op->name() + "/" + op->weights()[i].name});
  }
  for (const auto& w : op->weights())
    if (w.table) {
      if (node.inputs.size() != 1 || spec(node.inputs[0]).kind != ColumnKind::ints)
        return op->error("an embedding takes one input of integer ids, got " +
                         (node.inputs.empty() ? std::string("none") : spec(inputs[0]).to_string()));
      node.table = 0;  // numbered in plan_backward()
    }
  auto ids = node.outputs;
  nodes_.push_back(std::move(node));
  planned_ = false;
  return ids;
}

Status Graph::set_outputs(const std::vector<int>& tensors, std::vector<std::string> names) {
  if (tensors.size() != names.size() || tensors.empty())
    return make_error(Errc::invalid_argument, "a model needs one name per output");
  outputs_.clear();
  for (size_t i = 0; i < tensors.size(); ++i) {
    const int t = tensors[i];
    if (t < 0 || t >= static_cast<int>(specs_.size()))
      return make_error(Errc::invalid_argument, "output '" + names[i] + "' is not in the graph");
    if (spec(t).kind != ColumnKind::floats)
      return make_error(Errc::invalid_argument, "output '" + names[i] + "' is " +
                                                    spec(t).to_string() +
                                                    ": a model's outputs are float tensors");
    outputs_.push_back({std::move(names[i]), spec(t), t});
  }
  plan_backward();  // the graph is complete: gradient(w) exists from now on
  return {};
}

Operation* Graph::operation(const std::string& name) const {
  for (const auto& l : ops_)
    if (l->name() == name) return l.get();
  return nullptr;
}

bool Graph::trains(const WeightRef& w) const {
  return w.layer->trainable() && w.weight().trainable;
}

int64_t Graph::num_parameters() const {
  int64_t n = 0;
  for (const auto& w : weights_)
    n += w.weight().shape.num_elements();
  return n;
}

Status Graph::to(Device device, Precision precision) {
  auto backend = backend_for(device);
  if (!backend) return backend.error();
  // Every kernel asked for before anything moves: a model is placed whole or not at all.
  for (const auto& op : ops_)
    for (Kernel k : op->kernels())
      if (!(*backend)->has(k)) return op->to(device, precision);  // the error naming it
  for (const auto& l : ops_)
    if (auto st = l->to(device, precision); !st) return st;
  device_ = device;
  precision_ = precision;
  // What the last step held lives on the old device: dropped, made afresh by the next.
  values_.clear();
  fed_.clear();
  for (auto& t : tables_)
    t = TableUse{t.weight, {}, {}, {}};
  for (auto* v : {&grads_, &scratch_grads_, &tensor_grads_, &zeros_})
    for (auto& g : *v)
      g = Tensor();
  for (auto& n : nodes_) {
    n.state = n.op->make_state();
    n.call = Call{};
    n.index = Tensor();
  }
  forwarded_ = false;
  return {};
}

size_t Graph::layer_index(const Node& n) const {
  return static_cast<size_t>(std::find(ops_.begin(), ops_.end(), n.op) - ops_.begin());
}

void Graph::plan_backward() {
  // Tables: one use per table weight, in weights() order.
  table_of_weight_.assign(weights_.size(), npos);
  tables_.clear();
  for (size_t w = 0; w < weights_.size(); ++w)
    if (weights_[w].weight().table) {
      table_of_weight_[w] = tables_.size();
      tables_.push_back({w, {}, {}, {}});
    }
  for (auto& n : nodes_) {
    if (n.table < 0) continue;
    const size_t first = first_weight_[layer_index(n)];
    for (size_t i = 0; i < n.op->weights().size(); ++i)
      if (n.op->weights()[i].table) n.table = static_cast<int>(table_of_weight_[first + i]);
  }
  // A tensor needs a gradient when it depends on a trained weight.
  needs_grad_.assign(specs_.size(), false);
  for (auto& n : nodes_) {
    bool trained = false;
    if (!n.host) {
      const size_t first = first_weight_[layer_index(n)];
      for (size_t i = 0; i < n.op->weights().size(); ++i)
        trained = trained || trains(weights_[first + i]);
      for (int in : n.inputs)
        trained = trained || needs_grad_[static_cast<size_t>(in)];
    }
    n.wants_grad = trained && n.op->differentiable();
    for (int out : n.outputs)
      needs_grad_[static_cast<size_t>(out)] = n.wants_grad && spec(out).kind == ColumnKind::floats;
  }
  // A weight's gradient is final once its layer's first call (in forward order) has run
  // backward; a trained weight no call reaches is final at the end (zeros).
  final_at_.assign(weights_.size(), npos);
  for (size_t k = 0; k < nodes_.size(); ++k) {
    const Node& n = nodes_[k];
    if (n.host || !n.wants_grad) continue;
    const size_t first = first_weight_[layer_index(n)];
    for (size_t i = 0; i < n.op->weights().size(); ++i)
      if (trains(weights_[first + i]) && final_at_[first + i] == npos) final_at_[first + i] = k;
  }
  gradient_order_.clear();
  for (size_t k = nodes_.size(); k-- > 0;) {
    const Node& n = nodes_[k];
    if (n.host || !n.wants_grad) continue;
    const size_t first = first_weight_[layer_index(n)];
    for (size_t i = 0; i < n.op->weights().size(); ++i)
      if (final_at_[first + i] == k) gradient_order_.push_back(first + i);
  }
  for (size_t w = 0; w < weights_.size(); ++w)
    if (final_at_[w] == npos && trains(weights_[w])) gradient_order_.push_back(w);
  grads_.resize(weights_.size());
  scratch_grads_.resize(weights_.size());
  tensor_grads_.resize(specs_.size());
  zeros_.resize(specs_.size());
  planned_ = true;
}

Status Graph::feed(const Batch& batch) {
  if (!planned_) plan_backward();
  forwarded_ = false;
  batch_ = batch.size();
  values_.assign(specs_.size(), Ref{});
  fed_.resize(inputs_.size() * 2);
  fed_strings_.resize(inputs_.size());
  for (size_t i = 0; i < inputs_.size(); ++i) {
    const auto& in = inputs_[i];
    const Column* c = batch.column(in.name);
    if (c == nullptr)
      return make_error(Errc::invalid_argument, "the model's input '" + in.name +
                                                    "' is not in the data (it has " +
                                                    names_of(batch) + ")");
    const Shape shape = in.spec.with_batch(batch_);
    if (c->shape.num_elements() != shape.num_elements())
      return make_error(Errc::invalid_argument, "input '" + in.name + "': the data gives " +
                                                    c->shape.to_string() + " for a batch of " +
                                                    std::to_string(batch_) + ", the model takes " +
                                                    in.spec.to_string() + " per example");
    Ref r;
    r.kind = in.spec.kind;
    r.shape = shape;
    Tensor& host = fed_[2 * i];
    switch (in.spec.kind) {
      case ColumnKind::floats: {
        if (c->kind == ColumnKind::strings)
          return make_error(Errc::invalid_argument,
                            "input '" + in.name + "' takes numbers, the data gives strings");
        host.resize(shape);
        if (c->kind == ColumnKind::floats)
          std::copy(c->floats.begin(), c->floats.end(), host.data());
        else
          std::transform(c->ints.begin(), c->ints.end(), host.data(),
                         [](int64_t v) { return static_cast<float>(v); });
        r.tensor = on(device_, host, fed_[2 * i + 1]);
        break;
      }
      case ColumnKind::ints: {
        if (c->kind == ColumnKind::strings)
          return make_error(Errc::invalid_argument,
                            "input '" + in.name + "' takes integer ids, the data gives strings");
        if (host.dtype() != DType::int64) host = Tensor(shape, DType::int64, Device::cpu());
        host.resize(shape);
        auto* to = host.data_as<int64_t>();
        if (c->kind == ColumnKind::ints) {
          std::copy(c->ints.begin(), c->ints.end(), to);
        } else {
          for (size_t k = 0; k < c->floats.size(); ++k) {
            const float v = c->floats[k];
            if (v != static_cast<float>(static_cast<int64_t>(v)))
              return make_error(
                  Errc::invalid_argument,
                  "input '" + in.name + "' takes integer ids, the data gives " + std::to_string(v));
            to[k] = static_cast<int64_t>(v);
          }
        }
        r.tensor = host;
        break;
      }
      case ColumnKind::strings:
        if (c->kind != ColumnKind::strings)
          return make_error(Errc::invalid_argument,
                            "input '" + in.name + "' takes strings, the data gives numbers");
        fed_strings_[i] = c->strings;
        r.strings = &fed_strings_[i];
        break;
    }
    values_[static_cast<size_t>(in.tensor)] = r;
  }
  // The host part: lookups and hashing, in order.
  for (size_t k = 0; k < nodes_.size(); ++k) {
    Node& n = nodes_[k];
    if (!n.host) continue;
    n.call.inputs.clear();
    for (int in : n.inputs)
      n.call.inputs.push_back(values_[static_cast<size_t>(in)]);
    n.call.training = false;
    n.call.state = n.state.get();
    if (auto st = n.op->forward(n.call); !st) return st;
    for (size_t o = 0; o < n.outputs.size(); ++o)
      values_[static_cast<size_t>(n.outputs[o])] = n.call.outputs[o];
  }
  return collect_tables();
}

Status Graph::feed(ConstTensorView x) {
  if (!planned_) plan_backward();
  const bool host = std::any_of(nodes_.begin(), nodes_.end(), [](const Node& n) { return n.host; });
  if (inputs_.size() != 1 || inputs_[0].spec.kind != ColumnKind::floats || !tables_.empty() || host)
    return make_error(Errc::internal,
                      "a batch given as one tensor to a graph of several inputs, tables or host "
                      "layers");
  const Input& in = inputs_[0];
  if (x.dtype() != DType::float32)
    return make_error(Errc::invalid_argument,
                      "input '" + in.name + "' takes float32 values, the data gives another type");
  const int64_t n = x.shape().rank() == 0 ? 0 : x.shape()[0];
  const Shape shape = in.spec.with_batch(n);
  if (x.size() != shape.num_elements())
    return make_error(Errc::invalid_argument, "input '" + in.name + "': the data gives " +
                                                  x.shape().to_string() + ", the model takes " +
                                                  in.spec.to_string() + " per example");
  forwarded_ = false;
  batch_ = n;
  values_.assign(specs_.size(), Ref{});
  fed_.resize(2);
  Ref r;
  r.kind = ColumnKind::floats;
  r.shape = shape;
  r.tensor = on(device_, x.reshaped(shape), fed_[1]);
  values_[static_cast<size_t>(in.tensor)] = r;
  return {};
}

Status Graph::collect_tables() {
  // Every call's ids, then each table's unique ones and each call's index into them. The
  // buffers are kept from step to step: on the CPU a step allocates nothing here once warm
  // (a graph on a GPU copies each call's index there).
  all_ids_.resize(tables_.size());
  all_index_.resize(tables_.size());
  // Each table's calls' id tensors, in node order: tables read through the same tensors
  // read the same ids (a DeepFM's factor and linear Embeddings of one input).
  std::vector<std::vector<int>>& reads = table_reads_;
  reads.resize(tables_.size());
  for (auto& r : reads)
    r.clear();
  for (auto& n : nodes_)
    if (n.table >= 0) reads[static_cast<size_t>(n.table)].push_back(n.inputs[0]);
  // Each table's ids: its one call's tensor where it has one call (not copied), else every
  // call's ids one after another (in all_ids_); empty where it shares an earlier table's.
  std::vector<std::pair<const int64_t*, size_t>>& ids = table_ids_;
  ids.assign(tables_.size(), {nullptr, 0});
  for (size_t t = 0; t < tables_.size(); ++t) {
    all_ids_[t].clear();
    size_t same = 0;
    while (same < t && reads[same] != reads[t])
      ++same;
    if (same < t) continue;  // shares an earlier table's ids: not collected again
    if (reads[t].size() == 1) {
      const Ref& r = values_[static_cast<size_t>(reads[t][0])];
      ids[t] = {r.ints(), static_cast<size_t>(r.tensor.size())};
      continue;
    }
    for (int id : reads[t]) {
      const Ref& r = values_[static_cast<size_t>(id)];
      all_ids_[t].insert(all_ids_[t].end(), r.ints(), r.ints() + r.tensor.size());
    }
    ids[t] = {all_ids_[t].data(), all_ids_[t].size()};
  }
  auto same_ids = [&](size_t a, size_t b) {
    return ids[a].second == ids[b].second &&
           std::equal(ids[a].first, ids[a].first + ids[a].second, ids[b].first);
  };
  // Tables read by the same ids share one deduplication: their unique ids and index are
  // those of the first table that computed them (its owner: through the same tensors, or
  // other tensors holding the same ids).
  std::vector<size_t>& owner = table_owner_;
  owner.assign(tables_.size(), 0);
  for (size_t t = 0; t < tables_.size(); ++t) {
    const Weight& w = weights_[tables_[t].weight].weight();
    const bool shares = ids[t].first == nullptr;  // an earlier table's tensors
    size_t same = 0;
    while (same < t && reads[same] != reads[t] &&
           (shares || owner[same] != same || !same_ids(same, t)))
      ++same;
    owner[t] = same < t ? owner[same] : t;
    if (owner[t] != t)
      tables_[t].ids = tables_[owner[t]].ids;
    else
      unique_ids(ids[t].first, ids[t].second, tables_[t].ids, all_index_[t]);
    const std::vector<int32_t>& index = all_index_[owner[t]];
    if (!w.keyed)
      for (int64_t id : tables_[t].ids)
        if (id < 0 || id >= w.shape[0])
          return weights_[tables_[t].weight].layer->error("id " + std::to_string(id) +
                                                          " is outside its table of " +
                                                          std::to_string(w.shape[0]) + " rows");
    // Split the index back by call, in node order.
    size_t at = 0;
    for (auto& n : nodes_) {
      if (n.table != static_cast<int>(t)) continue;
      const auto count =
          static_cast<size_t>(values_[static_cast<size_t>(n.inputs[0])].tensor.size());
      const Shape shape{static_cast<int64_t>(count)};
      Tensor& host = device_.is_cpu() ? n.index : n.host_index;
      if (host.dtype() != DType::int32 || !host.device().is_cpu())
        host = Tensor(shape, DType::int32, Device::cpu());
      else
        host.resize(shape);
      std::copy_n(index.begin() + static_cast<std::ptrdiff_t>(at), count, host.data_as<int32_t>());
      at += count;
      if (!device_.is_cpu()) n.index = host.to(device_);
    }
  }
  return {};
}

Status Graph::forward(bool training, uint64_t seed) {
  std::vector<Tensor> staged(tables_.size());
  std::vector<ConstTensorView> rows(tables_.size());
  for (size_t t = 0; t < tables_.size(); ++t) {
    const Weight& w = weights_[tables_[t].weight].weight();
    const auto& r = tables_[t].rows;
    const int64_t width = w.shape[w.shape.rank() - 1];
    if (r.shape() != Shape{static_cast<int64_t>(tables_[t].ids.size()), width})
      return make_error(Errc::internal, "table '" + weights_[tables_[t].weight].path + "' given " +
                                            r.shape().to_string() + " rows for " +
                                            std::to_string(tables_[t].ids.size()) + " ids");
    const auto t0 = std::chrono::steady_clock::now();
    if (r.device() != device_) tables_[t].rows = r.to(device_);
    if (!profile_.empty()) timed(profile_.back().forward_s, t0);
    rows[t] = tables_[t].rows;
  }
  for (size_t k = 0; k < nodes_.size(); ++k) {
    Node& n = nodes_[k];
    if (n.host) continue;
    n.call.inputs.clear();
    for (int in : n.inputs)
      n.call.inputs.push_back(values_[static_cast<size_t>(in)]);
    n.call.training = training;
    n.call.seed = call_seed(seed, k);
    n.call.state = n.state.get();
    if (n.table >= 0) {
      n.call.table_rows = rows[static_cast<size_t>(n.table)];
      n.call.table_index = n.index;
    }
    const auto t0 = std::chrono::steady_clock::now();
    if (auto st = n.op->forward(n.call); !st) return st;
    if (!profile_.empty()) timed(profile_[k].forward_s, t0);
    TROUPE_ASSERT(n.call.outputs.size() == n.outputs.size(), "a layer gave another output count");
    for (size_t o = 0; o < n.outputs.size(); ++o) {
      const int id = n.outputs[o];
      TROUPE_ASSERT(n.call.outputs[o].shape == spec(id).with_batch(batch_),
                    "a layer's output has another shape than it built");
      values_[static_cast<size_t>(id)] = n.call.outputs[o];
    }
  }
  forwarded_ = true;
  return {};
}

ConstTensorView Graph::output(size_t i) const {
  TROUPE_ASSERT(forwarded_ && i < outputs_.size(), "output() before forward() or out of range");
  return values_[static_cast<size_t>(outputs_[i].tensor)].tensor;
}

const std::vector<size_t>& Graph::gradient_order() {
  if (!planned_) plan_backward();
  return gradient_order_;
}

void Graph::backward(const std::vector<ConstTensorView>& doutputs,
                     const std::function<void(size_t)>& weight_done) {
  TROUPE_ASSERT(forwarded_ && doutputs.size() == outputs_.size(), "backward() needs a forward()");
  Backend& be = *backend_for(device_).value();
  dvalues_.assign(specs_.size(), ConstTensorView{});
  // Where a tensor's gradient has more than one part, they are summed in tensor_grads_.
  std::vector<bool> summed(specs_.size(), false);
  auto accumulate = [&](int id, ConstTensorView g) {
    auto& d = dvalues_[static_cast<size_t>(id)];
    if (d.empty()) {
      d = g;
      return;
    }
    Tensor& sum = tensor_grads_[static_cast<size_t>(id)];
    if (!summed[static_cast<size_t>(id)]) {
      if (sum.device() != device_) sum = Tensor(d.shape(), DType::float32, device_);
      sum.resize(d.shape());
      be.add_into(d, g, sum);  // the first two parts in one pass
      summed[static_cast<size_t>(id)] = true;
    } else {
      be.add(g, sum);
    }
    d = sum;
  };
  for (size_t i = 0; i < outputs_.size(); ++i)
    if (!doutputs[i].empty()) accumulate(outputs_[i].tensor, doutputs[i]);

  std::vector<bool> written(weights_.size(), false);
  for (size_t k = nodes_.size(); k-- > 0;) {
    Node& n = nodes_[k];
    if (n.host || !n.wants_grad) continue;
    Call& c = n.call;
    c.doutputs.clear();
    for (int out : n.outputs) {
      auto d = dvalues_[static_cast<size_t>(out)];
      if (d.empty()) {  // no gradient reached this output: zeros
        Tensor& z = zeros_[static_cast<size_t>(out)];
        const Shape s = spec(out).with_batch(batch_);
        if (z.device() != device_ || z.shape() != s) {
          z = Tensor(s, DType::float32, device_);
        }
        d = z;
      }
      c.doutputs.push_back(d);
    }
    c.want_dinputs.clear();
    for (int in : n.inputs)
      c.want_dinputs.push_back(needs_grad_[static_cast<size_t>(in)]);
    c.dinputs.assign(n.inputs.size(), ConstTensorView{});
    const size_t first = first_weight_[layer_index(n)];
    c.dweights.assign(n.op->weights().size(), nullptr);
    for (size_t i = 0; i < c.dweights.size(); ++i) {
      const size_t w = first + i;
      if (!trains(weights_[w])) continue;
      const size_t t = table_of_weight_[w];
      Tensor& target = t != npos ? tables_[t].row_grads : grads_[w];
      c.dweights[i] = written[w] ? &scratch_grads_[w] : &target;
    }
    c.state = n.state.get();
    const auto t0 = std::chrono::steady_clock::now();
    n.op->backward(c);
    if (!profile_.empty()) timed(profile_[k].backward_s, t0);
    for (size_t i = 0; i < c.dweights.size(); ++i) {
      const size_t w = first + i;
      if (c.dweights[i] == nullptr) continue;
      if (written[w]) {
        const size_t t = table_of_weight_[w];
        be.add(scratch_grads_[w], t != npos ? tables_[t].row_grads : grads_[w]);
      }
      written[w] = true;
      if (weight_done && final_at_[w] == k) weight_done(w);
    }
    for (size_t i = 0; i < n.inputs.size(); ++i)
      if (c.want_dinputs[i]) {
        TROUPE_ASSERT(!c.dinputs[i].empty(), "a layer left a wanted input gradient empty");
        accumulate(n.inputs[i], c.dinputs[i]);
      }
  }
  // A trained weight no call reached (a layer off every output's path) gets zeros.
  for (size_t w = 0; w < weights_.size(); ++w) {
    if (written[w] || !trains(weights_[w])) continue;
    const size_t t = table_of_weight_[w];
    Tensor& g = t != npos ? tables_[t].row_grads : grads_[w];
    const Weight& wt = weights_[w].weight();
    const Shape s = t != npos ? Shape{static_cast<int64_t>(tables_[t].ids.size()),
                                      wt.shape[wt.shape.rank() - 1]}
                              : wt.shape;
    if (g.device() != device_ || g.shape() != s) g = Tensor(s, DType::float32, device_);
    be.fill(g, 0.0f);  // in place: a caller may hold its address (gradient())
    if (weight_done) weight_done(w);
  }
}

void Graph::set_profiling(bool on) {
  profile_.clear();
  if (!on) return;
  for (const Node& n : nodes_)
    profile_.push_back({n.op->name(), n.op->class_name()});
  profile_.push_back({"(rows)", "to the device"});
}

std::vector<Graph::CallTime> Graph::take_profile() {
  std::vector<CallTime> out = profile_;
  for (auto& c : profile_)
    c.forward_s = c.backward_s = 0;
  return out;
}

void Graph::timed(double& into, std::chrono::steady_clock::time_point from) {
  (void)backend_for(device_).value()->synchronize();
  into += std::chrono::duration<double>(std::chrono::steady_clock::now() - from).count();
}

}  // namespace troupe::core::graph
