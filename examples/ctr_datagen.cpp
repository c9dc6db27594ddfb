// Click logs with a known answer: writes Criteo-format text (label, 13 integers, 26
// categorical hex strings, tab-separated) and/or TFRecord files of tf.train.Example
// (label, ids, dense) from a hidden teacher, so the best achievable AUC is known.
//
//   build/bin/ctr_datagen --out /tmp/ctr --rows 1000000 --files 4 --format both
//
// The teacher is a factorization machine with a linear part over the dense features:
//   logit = b + sum_f w_f[c_f] + sum_{f<g} <v_f[c_f], v_g[c_g]> + u . log1p(x)
// with categories drawn per field from a Zipf distribution (field f has vocab >> (f % 4)
// categories; a few values missing) and the click drawn from sigmoid(logit). Each
// category is written as an 8-digit hex string, as Criteo's are; TFRecord ids are the
// hashed buckets the Criteo reader computes from those strings, so both formats give the
// same batches. The held-out file's teacher AUC and log loss (computed from the teacher's
// own probabilities) go to teacher.json and the final JSON line.
//
// With --raw-ids the categories are raw 64-bit ids (16 hex digits) from vocabularies of up
// to 10^8 per field: the Zipf draw is inverted in closed form and the teacher's weights are
// drawn from a hash of (field, category), so nothing is stored per category and most ids
// are rare, new ones appearing all through the log. TFRecord ids are then the keys the
// Criteo reader computes with raw keys (core::categorical_key), for dynamic tables; the
// Criteo text trains hashed tables too.
//
// With --ranked-ids the TFRecord ids are frequency ranks (rank * 26 + field): the ids a
// vocabulary ordered by frequency would give, the hottest first, for measuring how a
// table's rows load its PS tasks (ctr_ps --shard-rows).
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <random>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "core/data/record_io.hpp"
#include "core/data/text_formats.hpp"
#include "core/data/tf_example.hpp"
#include "core/json_text.hpp"
#include "core/metrics.hpp"
#include "examples/command_line.hpp"

namespace tc = troupe::core;

namespace {

constexpr int kFields = tc::criteo_categorical_fields;
constexpr int kInts = tc::criteo_integer_fields;

struct Settings {
  std::string out;
  int64_t rows = 100000;
  int64_t heldout_rows = 50000;
  int files = 1;
  std::string format = "both";
  int64_t vocab = 1000;
  double zipf = 1.1;
  int dim = 4;
  double sigma_w = 0.25, sigma_v = 0.15, sigma_u = 0.2;
  double missing = 0.02;
  double target_ctr = 0.25;
  int64_t buckets = 1 << 20;
  uint64_t seed = 1;
  bool raw_ids = false;
  bool ranked_ids = false;
};

uint64_t mix64(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return x;
}

uint32_t mix32(uint64_t x) {
  return static_cast<uint32_t>(mix64(x));
}

// A standard normal from a hash (Box-Muller over two 26-bit uniforms).
double hashed_normal(uint64_t h) {
  const uint64_t a = mix64(h), b = mix64(a ^ 0x9e3779b97f4a7c15ull);
  const double u1 = (static_cast<double>(a >> 38) + 0.5) / 67108864.0;
  const double u2 = static_cast<double>(b >> 38) / 67108864.0;
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

class Teacher {
 public:
  explicit Teacher(const Settings& s) : s_(s), rng_(s.seed) {
    std::normal_distribution<double> n01(0.0, 1.0);
    for (int f = 0; f < kFields; ++f) {
      const int64_t v = std::max<int64_t>(2, s.vocab >> (f % 4));
      vocab_[f] = v;
      if (s.raw_ids) continue;  // drawn in closed form, weights hashed: nothing stored
      // Zipf CDF over categories 0..v-1 (category 0 the most frequent); index v: missing.
      auto& cdf = cdf_[f];
      cdf.resize(static_cast<size_t>(v));
      double total = 0.0;
      for (int64_t c = 0; c < v; ++c)
        cdf[static_cast<size_t>(c)] = total += 1.0 / std::pow(static_cast<double>(c + 1), s.zipf);
      for (auto& x : cdf)
        x /= total;
      w_[f].resize(static_cast<size_t>(v + 1));
      v_[f].resize(static_cast<size_t>((v + 1) * s.dim));
      for (auto& x : w_[f])
        x = s.sigma_w * n01(rng_);
      for (auto& x : v_[f])
        x = s.sigma_v * n01(rng_);
    }
    for (auto& x : u_)
      x = s.sigma_u * n01(rng_);
    // The bias that gives about the target click rate on a sample.
    std::vector<double> logits;
    for (int i = 0; i < 20000; ++i)
      logits.push_back(draw().logit);
    double lo = -20, hi = 20;
    for (int it = 0; it < 60; ++it) {
      const double mid = (lo + hi) / 2;
      double ctr = 0;
      for (double l : logits)
        ctr += 1 / (1 + std::exp(-(l + mid)));
      (ctr / static_cast<double>(logits.size()) < s.target_ctr ? lo : hi) = mid;
    }
    bias_ = (lo + hi) / 2;
  }

  struct Row {
    int64_t cat[kFields];  // category per field; vocab_[f] means missing
    int64_t ints[kInts];   // -1: missing
    double logit = 0;
    float label = 0;
  };

  Row draw() {
    Row r;
    std::uniform_real_distribution<double> u01(0.0, 1.0);
    double logit = bias_;
    std::vector<double> sum(static_cast<size_t>(s_.dim), 0.0);
    double squares = 0.0;
    for (int f = 0; f < kFields; ++f) {
      int64_t c = vocab_[f];
      if (u01(rng_) >= s_.missing) {
        if (s_.raw_ids) {
          c = zipf_rank(u01(rng_), vocab_[f]);
        } else {
          const auto& cdf = cdf_[f];
          c = std::lower_bound(cdf.begin(), cdf.end(), u01(rng_)) - cdf.begin();
        }
        c = std::min<int64_t>(c, vocab_[f] - 1);
      }
      r.cat[f] = c;
      logit += weight(f, c, -1);
      for (int j = 0; j < s_.dim; ++j) {
        const double e = weight(f, c, j);
        sum[static_cast<size_t>(j)] += e;
        squares += e * e;
      }
    }
    for (double x : sum)
      logit += 0.5 * x * x;
    logit -= 0.5 * squares;
    for (int k = 0; k < kInts; ++k) {
      // Counts spread over a few orders of magnitude, as Criteo's are.
      if (u01(rng_) < s_.missing) {
        r.ints[k] = -1;
        continue;
      }
      r.ints[k] = static_cast<int64_t>(std::floor(std::exp(u01(rng_) * (2.0 + k % 5)))) - 1;
      logit += u_[k] * (std::log1p(static_cast<double>(r.ints[k])) - 1.5);
    }
    r.logit = logit;
    r.label = u01(rng_) < 1 / (1 + std::exp(-logit)) ? 1.0f : 0.0f;
    return r;
  }

  /// The category's string as written in the Criteo file ("" when missing).
  std::string category(int f, int64_t c) const {
    if (c == vocab_[f]) return {};
    if (s_.raw_ids) {
      char buf[17];
      std::snprintf(buf, sizeof buf, "%016llx",
                    static_cast<unsigned long long>(mix64((s_.seed * 0x9e3779b97f4a7c15ull) ^
                                                          (uint64_t(f) << 56) ^ uint64_t(c))));
      return buf;
    }
    char buf[9];
    std::snprintf(buf, sizeof buf, "%08x",
                  mix32((s_.seed << 40) ^ (uint64_t(f) << 32) ^ uint64_t(c)));
    return buf;
  }

 private:
  // Category c's linear weight (j < 0) or its j-th factor.
  double weight(int f, int64_t c, int j) const {
    if (!s_.raw_ids)
      return j < 0 ? w_[f][static_cast<size_t>(c)] : v_[f][static_cast<size_t>(c * s_.dim + j)];
    const uint64_t h = mix64((s_.seed << 20) ^ (uint64_t(f) << 50) ^ (uint64_t(j + 1) << 40)) ^
                       static_cast<uint64_t>(c);
    return (j < 0 ? s_.sigma_w : s_.sigma_v) * hashed_normal(h);
  }

  // A Zipf rank in [0, n) by inverting the continuous density r^-s on [1, n + 1).
  int64_t zipf_rank(double u, int64_t n) const {
    const double z = s_.zipf, top = static_cast<double>(n) + 1;
    double r;
    if (std::abs(z - 1.0) < 1e-9)
      r = std::exp(u * std::log(top));
    else
      r = std::pow(1 + u * (std::pow(top, 1 - z) - 1), 1 / (1 - z));
    return std::clamp<int64_t>(static_cast<int64_t>(r) - 1, 0, n - 1);
  }

  const Settings& s_;
  std::mt19937_64 rng_;
  int64_t vocab_[kFields];
  std::vector<double> cdf_[kFields];
  std::vector<double> w_[kFields], v_[kFields];
  double u_[kInts];
  double bias_ = 0;
};

struct Writer {
  std::FILE* text = nullptr;
  std::FILE* records = nullptr;
  ~Writer() {
    if (text) std::fclose(text);
    if (records) std::fclose(records);
  }
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Writes Criteo-format and TFRecord click logs from a hidden FM teacher"};
  Settings s;
  app.add_option("--out", s.out, "output directory")->required();
  app.add_option("--rows", s.rows, "training rows")->check(CLI::NonNegativeNumber);
  app.add_option("--heldout-rows", s.heldout_rows, "held-out rows")->check(CLI::NonNegativeNumber);
  app.add_option("--files", s.files, "training files")->check(CLI::Range(1, 10000));
  app.add_option("--format", s.format)->check(CLI::IsMember({"criteo", "tfrecord", "both"}));
  app.add_option("--vocab", s.vocab, "categories of the largest fields")
      ->check(CLI::Range(int64_t{2}, int64_t{1} << 40));
  app.add_flag("--raw-ids", s.raw_ids,
               "raw 64-bit ids (vocabularies up to 10^8 and beyond, nothing stored per id); "
               "TFRecord ids are their keys (core::categorical_key)");
  app.add_flag("--ranked-ids", s.ranked_ids,
               "TFRecord ids by frequency rank instead of hash: rank * 26 + field (rank 0 the "
               "most frequent; a rank past --buckets-per-field wraps), one vocabulary over the "
               "fields ordered by frequency as a lookup layer's is, so the hottest ids are the "
               "table's first rows (the Criteo text is unchanged)");
  app.add_option("--zipf", s.zipf, "Zipf exponent of category frequencies")
      ->check(CLI::Range(0.0, 5.0));
  app.add_option("--teacher-dim", s.dim)->check(CLI::Range(1, 64));
  app.add_option("--sigma-w", s.sigma_w);
  app.add_option("--sigma-v", s.sigma_v);
  app.add_option("--missing", s.missing)->check(CLI::Range(0.0, 1.0));
  app.add_option("--ctr", s.target_ctr)->check(CLI::Range(0.01, 0.99));
  app.add_option("--buckets-per-field", s.buckets, "hash buckets per field for TFRecord ids")
      ->check(CLI::Range(int64_t{1}, (int64_t{1} << 56) / kFields));
  app.add_option("--seed", s.seed);
  if (auto end = troupe::examples::parse_command_line(app, argc, argv, "ctr_datagen")) return *end;

  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(s.out, ec);
  auto fail = [](const std::string& what) {
    std::cerr << "ctr_datagen: " << what << std::endl;
    std::cout << tc::json_text(nlohmann::json{{"ok", false}, {"error", what}}) << std::endl;
    return 1;
  };
  if (ec) return fail(s.out + ": " + ec.message());
  if (s.raw_ids && s.ranked_ids) return fail("--ranked-ids and --raw-ids exclude each other");
  if (!s.raw_ids && s.vocab > (int64_t{1} << 24))
    return fail("--vocab above 2^24 needs --raw-ids (the teacher's tables would not fit)");
  const bool text = s.format != "tfrecord", records = s.format != "criteo";
  const auto t0 = std::chrono::steady_clock::now();
  Teacher teacher(s);
  tc::AUC auc(10000);
  tc::Mean logloss;
  int64_t clicks = 0;
  std::string line, example;
  tc::Example e;
  auto write_file = [&](const std::string& stem, int64_t rows, bool heldout) -> bool {
    Writer w;
    if (text && !(w.text = std::fopen((stem + ".txt").c_str(), "wb"))) return false;
    if (records && !(w.records = std::fopen((stem + ".tfrecord").c_str(), "wb"))) return false;
    for (int64_t i = 0; i < rows; ++i) {
      const auto r = teacher.draw();
      if (heldout) {
        const double p = 1 / (1 + std::exp(-r.logit));
        const float pf = static_cast<float>(p);
        auc.update(tc::ConstTensorView(&pf, tc::Shape{1}), &r.label);
        logloss.update(
            -(r.label > 0 ? std::log(std::max(p, 1e-12)) : std::log(std::max(1 - p, 1e-12))));
      }
      clicks += r.label > 0;
      line.assign(r.label > 0 ? "1" : "0");
      e.features.assign(kInts, 0.0f);
      e.ids.resize(kFields);
      e.label = r.label;
      for (int k = 0; k < kInts; ++k) {
        line.push_back('\t');
        if (r.ints[k] >= 0) {
          line += std::to_string(r.ints[k]);
          e.features[static_cast<size_t>(k)] = std::log1p(static_cast<float>(r.ints[k]));
        }
      }
      for (int f = 0; f < kFields; ++f) {
        const std::string cat = teacher.category(f, r.cat[f]);
        line.push_back('\t');
        line += cat;
        e.ids[static_cast<size_t>(f)] = s.raw_ids ? tc::categorical_key(f, cat)
                                        : s.ranked_ids
                                            ? (r.cat[f] % s.buckets) * kFields + f
                                            : f * s.buckets + tc::hash_bucket(cat, s.buckets);
      }
      line.push_back('\n');
      if (w.text && std::fwrite(line.data(), 1, line.size(), w.text) != line.size()) return false;
      if (w.records) {
        const std::string framed = tc::frame_record(tc::encode_example(e));
        if (std::fwrite(framed.data(), 1, framed.size(), w.records) != framed.size()) return false;
      }
    }
    return (!w.text || std::fflush(w.text) == 0) && (!w.records || std::fflush(w.records) == 0);
  };
  std::vector<std::string> train_files;
  for (int f = 0; f < s.files; ++f) {
    char name[64];
    std::snprintf(name, sizeof name, "train-%05d-of-%05d", f, s.files);
    const std::string stem = s.out + "/" + name;
    const int64_t rows = s.rows / s.files + (f < s.rows % s.files ? 1 : 0);
    if (!write_file(stem, rows, false)) return fail(stem + ": write failed");
    train_files.push_back(stem);
  }
  if (!write_file(s.out + "/heldout", s.heldout_rows, true))
    return fail(s.out + "/heldout: write failed");
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  nlohmann::json result{
      {"ok", true},
      {"out", s.out},
      {"format", s.format},
      {"rows", s.rows},
      {"heldout_rows", s.heldout_rows},
      {"files", s.files},
      {"ctr", static_cast<double>(clicks) / std::max<int64_t>(1, s.rows + s.heldout_rows)},
      {"vocab", s.vocab},
      {"zipf", s.zipf},
      {"buckets_per_field", s.buckets},
      {"raw_ids", s.raw_ids},
      {"ranked_ids", s.ranked_ids},
      {"seed", s.seed},
      {"teacher_auc", auc.result()},
      {"teacher_logloss", logloss.result()},
      {"seconds", secs}};
  std::FILE* meta = std::fopen((s.out + "/teacher.json").c_str(), "wb");
  const std::string meta_text = result.dump(2) + "\n";
  if (meta == nullptr ||
      std::fwrite(meta_text.data(), 1, meta_text.size(), meta) != meta_text.size())
    return fail(s.out + "/teacher.json: write failed");
  std::fclose(meta);
  std::cout << tc::json_text(result) << std::endl;
  return 0;
}
