#include "core/parameter.hpp"

namespace troupe::core {

Status assign(const std::vector<Parameter>& params, std::vector<Tensor> values) {
  if (values.size() != params.size())
    return make_error(Errc::invalid_argument, std::to_string(values.size()) + " values for " +
                                                  std::to_string(params.size()) + " parameters");
  for (size_t i = 0; i < params.size(); ++i)
    if (values[i].shape() != params[i].value->shape())
      return make_error(Errc::invalid_argument, "variable '" + params[i].name + "' has shape " +
                                                    values[i].shape().to_string() +
                                                    ", the model expects " +
                                                    params[i].value->shape().to_string());
  for (size_t i = 0; i < params.size(); ++i) {
    if (params[i].value->device() == values[i].device())
      *params[i].value = std::move(values[i]);
    else
      params[i].value->set(values[i]);
  }
  return {};
}

}  // namespace troupe::core
