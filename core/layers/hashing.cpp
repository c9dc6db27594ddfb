// Keras's Hashing in "int" mode: strings, or integers as their decimal text, to bins in
// [0, num_bins) on the host, bit for bit as Keras (through TensorFlow) bins them:
// FarmHash's Fingerprint64 modulo the bins (tf.strings.to_hash_bucket_fast) or, with a
// salt, SipHash-2-4 keyed by it (tf.strings.to_hash_bucket_strong). With a mask_value,
// values equal to it go to bin 0 and the others to 1 + their hash modulo num_bins - 1.

#include <charconv>

#include <nlohmann/json.hpp>

#include "core/layers/index_lookup.hpp"
#include "core/layers/string_hash.hpp"

namespace troupe::core::layers {

namespace {

struct HashingState final : CallState {
  Tensor out;
};

class Hashing final : public graph::Operation {
 public:
  std::vector<Kernel> kernels() const override { return {}; }
  Hashing(std::string name, int64_t num_bins, const nlohmann::json& mask,
          std::optional<std::array<uint64_t, 2>> salt)
      : Operation("Hashing", std::move(name)), num_bins_(num_bins), salt_(salt) {
    if (mask.is_string()) mask_string_ = mask.get<std::string>();
    if (mask.is_number_integer()) mask_int_ = mask.get<int64_t>();
  }

  bool on_host() const override { return true; }

  Expected<std::vector<TensorSpec>> build(const std::vector<TensorSpec>& in) override {
    if (in.size() != 1 || in[0].kind == ColumnKind::floats)
      return error("takes one input of strings or integers, got " +
                   (in.empty() ? std::string("none") : in[0].to_string()));
    if ((mask_string_ && in[0].kind != ColumnKind::strings) ||
        (mask_int_ && in[0].kind != ColumnKind::ints))
      return error("argument 'mask_value' is not of its input's kind (" + in[0].to_string() + ")");
    return std::vector<TensorSpec>{{ColumnKind::ints, in[0].shape}};
  }
  std::unique_ptr<CallState> make_state() const override {
    return std::make_unique<HashingState>();
  }

  Status forward(Call& c) override {
    const Ref& in = c.inputs[0];
    Tensor& out = host_ints(static_cast<HashingState&>(*c.state).out, in.shape);
    int64_t* to = out.data_as<int64_t>();
    const int64_t n = in.shape.num_elements();
    if (in.kind == ColumnKind::strings) {
      for (int64_t i = 0; i < n; ++i) {
        const std::string& s = (*in.strings)[static_cast<size_t>(i)];
        to[i] = mask_string_ && s == *mask_string_ ? 0 : bin(s);
      }
    } else {
      const int64_t* ids = in.ints();
      char text[24];  // an int64 in decimal: at most 20 characters
      for (int64_t i = 0; i < n; ++i) {
        if (mask_int_ && ids[i] == *mask_int_) {
          to[i] = 0;
          continue;
        }
        const auto r = std::to_chars(text, text + sizeof text, ids[i]);
        to[i] = bin(std::string_view(text, static_cast<size_t>(r.ptr - text)));
      }
    }
    c.outputs = {Ref{ColumnKind::ints, out.view(), nullptr, in.shape}};
    return {};
  }

  void backward(Call&) override {}  // a host layer: the graph never calls it

 private:
  // A value's bin: with a mask value (and more than one bin), bin 0 is the mask's alone.
  int64_t bin(std::string_view s) const {
    const bool masked = (mask_string_ || mask_int_) && num_bins_ > 1;
    const auto bins = static_cast<uint64_t>(masked ? num_bins_ - 1 : num_bins_);
    const uint64_t h = salt_ ? siphash64((*salt_)[0], (*salt_)[1], s) : fingerprint64(s);
    return static_cast<int64_t>(h % bins) + (masked ? 1 : 0);
  }

  int64_t num_bins_;
  std::optional<std::array<uint64_t, 2>> salt_;
  std::optional<std::string> mask_string_;
  std::optional<int64_t> mask_int_;
};

}  // namespace

Expected<std::unique_ptr<graph::Operation>> make_hashing(LayerConfig& c) {
  auto bins = c.integer("num_bins");
  if (!bins) return bins.error();
  if (*bins <= 0) return c.error("num_bins", "must be positive");
  const nlohmann::json mask = c.raw("mask_value");
  if (!mask.is_null() && !mask.is_string() && !mask.is_number_integer())
    return c.error("mask_value", "must be null, a string or an integer");
  auto salt = read_salt(c, "salt");
  if (!salt) return salt.error();
  if (auto st = c.allow("output_mode", {"int"}); !st) return st.error();
  if (auto st = c.allow("sparse", {false}); !st) return st.error();
  return std::unique_ptr<graph::Operation>(std::make_unique<Hashing>(c.name(), *bins, mask, *salt));
}

}  // namespace troupe::core::layers
