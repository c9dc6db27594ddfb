// Keras's IndexLookup in "int" mode (StringLookup, IntegerLookup): see index_lookup.hpp.
// The layer runs on the host when a batch is fed; its int64 indices feed an Embedding.

#include "core/layers/index_lookup.hpp"

#include <set>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "core/layers/string_hash.hpp"

namespace troupe::core::layers {

namespace {

struct LookupState final : CallState {
  Tensor out;
};

class IndexLookup final : public graph::Operation {
 public:
  std::vector<Kernel> kernels() const override { return {}; }
  IndexLookup(const std::string& class_name, std::string name, IndexLookupOptions o)
      : Operation(class_name, std::move(name)), o_(std::move(o)) {
    oov_start_ = o_.mask_token ? 1 : 0;
  }

  // Index `token_start + i` for token i; the special tokens checked by the factory.
  void set_tokens(const std::vector<std::string>& tokens, int64_t token_start) {
    for (size_t i = 0; i < tokens.size(); ++i) {
      const int64_t index = token_start + static_cast<int64_t>(i);
      if (o_.integer)
        ints_[std::stoll(tokens[i])] = index;
      else
        strings_[tokens[i]] = index;
    }
    if (o_.integer && o_.mask_token) mask_int_ = std::stoll(*o_.mask_token);
  }

  bool on_host() const override { return true; }

  Expected<std::vector<TensorSpec>> build(const std::vector<TensorSpec>& in) override {
    const ColumnKind want = o_.integer ? ColumnKind::ints : ColumnKind::strings;
    if (in.size() != 1 || in[0].kind != want)
      return error(std::string("takes one input of ") + kind_name(want) + ", got " +
                   (in.empty() ? std::string("none") : in[0].to_string()));
    return std::vector<TensorSpec>{{ColumnKind::ints, in[0].shape}};
  }
  std::unique_ptr<CallState> make_state() const override { return std::make_unique<LookupState>(); }

  Status forward(Call& c) override {
    const Ref& in = c.inputs[0];
    Tensor& out = host_ints(static_cast<LookupState&>(*c.state).out, in.shape);
    int64_t* to = out.data_as<int64_t>();
    const int64_t n = in.shape.num_elements();
    if (o_.integer) {
      const int64_t* ids = in.ints();
      for (int64_t i = 0; i < n; ++i) {
        auto index = index_of(ids[i]);
        if (!index) return index.error();
        to[i] = *index;
      }
    } else {
      for (int64_t i = 0; i < n; ++i) {
        auto index = index_of((*in.strings)[static_cast<size_t>(i)]);
        if (!index) return index.error();
        to[i] = *index;
      }
    }
    c.outputs = {Ref{ColumnKind::ints, out.view(), nullptr, in.shape}};
    return {};
  }

  void backward(Call&) override {}  // a host layer: the graph never calls it

 private:
  Expected<int64_t> index_of(int64_t v) const {
    if (mask_int_ && v == *mask_int_) return 0;
    auto it = ints_.find(v);
    if (it != ints_.end()) return it->second;
    if (o_.num_oov_indices > 1 && o_.floormod) {
      const int64_t m = v % o_.num_oov_indices;  // Python's floor modulo: never negative
      return oov_start_ + (m < 0 ? m + o_.num_oov_indices : m);
    }
    return oov_index(decimal(v));
  }

  Expected<int64_t> index_of(const std::string& s) const {
    if (o_.mask_token && s == *o_.mask_token) return 0;
    auto it = strings_.find(s);
    if (it != strings_.end()) return it->second;
    return oov_index(s);
  }

  Expected<int64_t> oov_index(const std::string& token) const {
    if (o_.num_oov_indices == 0)
      return error("'" + token + "' is not in the vocabulary and num_oov_indices is 0");
    if (o_.num_oov_indices == 1) return oov_start_;
    const auto bins = static_cast<uint64_t>(o_.num_oov_indices);
    const uint64_t h =
        o_.salt ? siphash64((*o_.salt)[0], (*o_.salt)[1], token) : fingerprint64(token);
    return oov_start_ + static_cast<int64_t>(h % bins);
  }

  IndexLookupOptions o_;
  int64_t oov_start_ = 0;
  std::unordered_map<std::string, int64_t> strings_;
  std::unordered_map<int64_t, int64_t> ints_;
  std::optional<int64_t> mask_int_;
};

}  // namespace

Tensor& host_ints(Tensor& t, const Shape& shape) {
  if (t.dtype() != DType::int64 || !t.device().is_cpu())
    t = Tensor(shape, DType::int64, Device::cpu());
  else
    t.resize(shape);
  return t;
}

Expected<std::unique_ptr<graph::Operation>> make_index_lookup(const std::string& class_name,
                                                              const std::string& name,
                                                              IndexLookupOptions o) {
  auto fail = [&](const std::string& key, const std::string& what) {
    return make_error(Errc::invalid_argument,
                      "layer '" + name + "' (" + class_name + "): argument '" + key + "': " + what);
  };
  if (o.vocabulary.empty())
    return fail("vocabulary",
                "is empty: Troupe needs the vocabulary in the config or the model's assets "
                "(adapt() the layer, or give one, before saving)");
  const int64_t oov_start = o.mask_token ? 1 : 0;
  const int64_t token_start = oov_start + o.num_oov_indices;
  // The special tokens may lead the vocabulary (an asset file holds them): dropped then.
  std::vector<std::string> special;
  if (o.mask_token) special.push_back(*o.mask_token);
  for (int64_t i = 0; i < o.num_oov_indices; ++i)
    special.push_back(o.oov_token);
  std::vector<std::string> tokens = o.vocabulary;
  if (tokens.size() >= special.size() && std::equal(special.begin(), special.end(), tokens.begin()))
    tokens.erase(tokens.begin(), tokens.begin() + static_cast<std::ptrdiff_t>(special.size()));
  std::set<std::string> seen;
  std::string repeated;
  for (const auto& t : tokens) {
    if (o.mask_token && t == *o.mask_token)
      return fail("vocabulary", "holds the mask token '" + t + "' after its start");
    if (!seen.insert(t).second) repeated += (repeated.empty() ? "'" : ", '") + t + "'";
  }
  if (!repeated.empty()) return fail("vocabulary", "repeats " + repeated);
  const int64_t size = token_start + static_cast<int64_t>(tokens.size());
  if (o.max_tokens && size > *o.max_tokens)
    return fail("max_tokens", "is " + std::to_string(*o.max_tokens) + ", the vocabulary has " +
                                  std::to_string(size) + " indices");
  if (o.vocabulary_size && size != *o.vocabulary_size)
    return fail("vocabulary_size", "is " + std::to_string(*o.vocabulary_size) +
                                       ", the vocabulary given has " + std::to_string(size) +
                                       " indices");
  auto layer = std::make_unique<IndexLookup>(class_name, name, std::move(o));
  layer->set_tokens(tokens, token_start);
  return std::unique_ptr<graph::Operation>(std::move(layer));
}

Expected<std::optional<std::array<uint64_t, 2>>> read_salt(LayerConfig& c, const std::string& key) {
  using Salt = std::optional<std::array<uint64_t, 2>>;
  const auto& v = c.raw(key);
  auto word = [](const nlohmann::json& e) {
    return e.is_number_unsigned() ? e.get<uint64_t>() : static_cast<uint64_t>(e.get<int64_t>());
  };
  if (v.is_null()) return Salt();
  if (v.is_number_integer()) return Salt(std::array<uint64_t, 2>{word(v), word(v)});
  if (v.is_array() && v.size() == 2 && v[0].is_number_integer() && v[1].is_number_integer())
    return Salt(std::array<uint64_t, 2>{word(v[0]), word(v[1])});
  return c.error(key, "must be null, an integer or two integers");
}

Status read_index_lookup(LayerConfig& c, IndexLookupOptions& o) {
  auto oov = c.integer("num_oov_indices", 1);
  if (!oov) return oov.error();
  if (*oov < 0) return c.error("num_oov_indices", "must be 0 or more");
  o.num_oov_indices = *oov;
  auto method = c.string("oov_method", "floormod");
  if (!method) return method.error();
  if (*method != "floormod" && *method != "farmhash")
    return c.error("oov_method", "must be \"floormod\" or \"farmhash\"");
  o.floormod = *method == "floormod";
  auto salt = read_salt(c, "salt");
  if (!salt) return salt.error();
  o.salt = *salt;
  for (const char* key : {"max_tokens", "vocabulary_size"}) {
    if (!c.has(key)) {
      c.raw(key);
      continue;
    }
    auto v = c.integer(key);
    if (!v) return v.error();
    (std::string(key) == "max_tokens" ? o.max_tokens : o.vocabulary_size) = *v;
  }
  if (o.max_tokens && *o.max_tokens <= 1) return c.error("max_tokens", "must be more than 1");
  if (auto st = c.allow("output_mode", {"int"}); !st) return st;
  if (auto st = c.allow("invert", {false}); !st) return st;
  if (auto st = c.allow("sparse", {false}); !st) return st;
  if (auto st = c.allow_null("idf_weights"); !st) return st;
  // Pads only the "one_hot", "multi_hot", "count" and "tf_idf" outputs; "int" is unchanged.
  if (auto pad = c.boolean("pad_to_max_tokens", false); !pad) return pad.error();
  return {};
}

}  // namespace troupe::core::layers
