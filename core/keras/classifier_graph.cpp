#include "core/keras/classifier_graph.hpp"

#include <utility>

namespace troupe::core::keras {

ClassifierGraph::ClassifierGraph(keras::KerasModel model) : model_(std::move(model)) {
  auto& g = graph();
  const auto& ws = g.weights();
  for (size_t w = 0; w < ws.size(); ++w)
    params_.push_back({ws[w].path, &ws[w].weight().value, &g.gradient(w)});
  per_example_ = g.inputs().front().spec.per_example();
  allocate_gradients();
}

void ClassifierGraph::allocate_gradients() {
  auto& g = graph();
  for (size_t w = 0; w < g.weights().size(); ++w)
    g.gradient(w) = Tensor(g.weights()[w].weight().value.shape(), DType::float32, g.device());
}

Expected<std::unique_ptr<ClassifierGraph>> ClassifierGraph::make(ClassifierForm form) {
  form.features = true;
  auto config = classifier_model_config(form);
  if (!config) return config.error();
  auto model = keras::build_keras_model(*config);
  if (!model) return model.error();
  return std::unique_ptr<ClassifierGraph>(new ClassifierGraph(std::move(*model)));
}

Status ClassifierGraph::check_input(const Shape& shape) const {
  if (shape.rank() >= 1 && shape.num_elements() == shape[0] * per_example_) return {};
  return make_error(Errc::invalid_argument, "the classifier takes " + std::to_string(per_example_) +
                                                " features an example, the data gives " +
                                                shape.to_string());
}

ConstTensorView ClassifierGraph::forward(ConstTensorView x) {
  auto& g = graph();
  auto fed = g.feed(x);
  TROUPE_ASSERT(fed.ok(), "a classifier's features were not checked (check_input)");
  auto st = g.forward(/*training=*/true, steps_++);
  TROUPE_ASSERT(st.ok(), "a classifier's layers failed on a checked input");
  return g.output(0);
}

void ClassifierGraph::backward_parameters(ConstTensorView dy,
                                          const std::function<void(size_t)>& gradient_done) {
  graph().backward({dy}, gradient_done);
}

Status ClassifierGraph::to(Device device, Precision precision) {
  if (auto st = graph().to(device, precision); !st) return st;
  allocate_gradients();
  return {};
}

Expected<std::unique_ptr<ClassifierGraph>> make_classifier(const std::string& name, uint64_t seed) {
  ClassifierForm form;
  form.seed = seed;
  if (name == "cnn")
    form.cnn = true;
  else if (name == "deep_mlp")
    form.widths = {784, 1024, 1024, 1024, 10};
  else if (name != "mlp")
    return make_error(Errc::invalid_argument,
                      "unknown model '" + name + "' (known: mlp, cnn, deep_mlp)");
  return ClassifierGraph::make(form);
}

}  // namespace troupe::core::keras
