// Writes valid inputs of every format a fuzz target reads, with the project's own writers,
// into DIR/<target>/: runs start from inputs that pass magics and checksums.
// Usage: fuzz_seeds DIR
#include <sys/socket.h>
#include <unistd.h>

#include <caf/all.hpp>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <string>

#include "actors/ps_shard_state.hpp"
#include "core/checkpoint/checkpoint.hpp"
#include "core/data/columns.hpp"
#include "core/data/record_io.hpp"
#include "core/data/tf_example.hpp"
#include "core/keras/keras_file.hpp"
#include "core/nn/ctr_export.hpp"
#include "core/runtime/codec.hpp"
#include "fuzz_seeds.hpp"
#include "net/channel.hpp"
#include "net/cluster_spec.hpp"
#include "net/node.hpp"

using namespace troupe;

namespace {

std::string dir;

void put(const std::string& target, const std::string& name, const std::string& bytes) {
  std::filesystem::create_directories(dir + "/" + target);
  std::ofstream(dir + "/" + target + "/" + name, std::ios::binary) << bytes;
}

// The bytes a writer puts on a connection.
template <class Write>
std::string on_the_wire(Write write) {
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM, 0, fds) != 0) return {};
  {
    net::Socket w(fds[1]);
    write(w);
  }
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;)
    out.append(buf, static_cast<size_t>(n));
  ::close(fds[0]);
  return out;
}

std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: fuzz_seeds DIR\n";
    return 2;
  }
  dir = argv[1];

  net::PsRequest request;
  request.op = static_cast<uint8_t>(net::PsOp::push_pull);
  request.tag = 7;
  request.items.push_back({"dense/kernel#0", {}, net::WireTensor{{2, 2}, {1, 2, 3, 4}}});
  request.items.push_back({"embedding#1", {3, 9}, net::WireTensor{{2, 1}, {5, 6}}});
  put("fuzz_channel", "request",
      on_the_wire([&](net::Socket& s) { (void)net::send_request(s, request); }));
  put("fuzz_channel", "reply", on_the_wire([&](net::Socket& s) {
        (void)net::send_reply(s, std::vector<net::PsItem>(request.items));
      }));
  put("fuzz_handshake", "hello", "TRA1" + std::string(64, 'x'));
  put("fuzz_handshake", "basp",
      std::string("\x01\0\0\0\0\0\0\x04", 8) + std::string(24, '\0') + "abcd");

  net::ClusterSpec spec({{"chief", {"chief-0.job.svc:2222"}},
                         {"ps", {"[::1]:2223", "127.0.0.1:2222"}},
                         {"worker", {"localhost:2224"}}});
  put("fuzz_tf_config", "tf_config", net::TFConfigClusterResolver::render(spec, {"worker", 0}));

  actors::PsShardState state;
  net::VariableDef def;
  def.name = "w";
  def.shape = {2, 3};
  def.optimizer = "adam";
  def.learning_rate = 0.1f;
  if (auto st = state.create(def); !st) {
    std::cerr << st.error().to_string() << "\n";
    return 1;
  }
  // A dynamic table's shard with a few rows, so that the fuzzer starts from its entries
  // (fuzz::delta_base, which fuzz_checkpoint applies delta inputs to).
  if (auto st = fuzz::delta_base(state); !st) {
    std::cerr << st.error().to_string() << "\n";
    return 1;
  }
  const std::string ckpt = dir + "/snapshot.tckpt";
  if (auto st = core::write_checkpoint(ckpt, state.snapshot()); !st) return 1;
  put("fuzz_checkpoint", "snapshot", file_bytes(ckpt));
  std::filesystem::remove(ckpt);

  // A delta snapshot after it: a row updated, one admitted, the dense variables pushed.
  if (!state.push_rows(2, "ids#0", {{5, 77}, {{2, 2}, {1, 1, 1, 1}}}).ok() ||
      !state.push(3, "d#0", {{3}, {1, 2, 3}}).ok())
    return 1;
  core::Checkpoint delta;
  for (const auto& name : state.shard_names())
    state.snapshot_shard_delta(name, delta);
  state.snapshot_counters(delta);
  delta.ints["delta"] = {0, 1};
  if (auto st = core::write_checkpoint(ckpt, delta); !st) return 1;
  put("fuzz_checkpoint", "delta", file_bytes(ckpt));
  std::filesystem::remove(ckpt);

  // A small DeepFM export with a dynamic table, in float32 and in bf16.
  core::CtrExport model;
  model.config.model.fields = 2;
  model.config.model.dense = 1;
  model.config.model.dim = 2;
  model.config.model.hidden = {3};
  model.config.dynamic = true;
  for (const auto& [name, shape] : core::ctr_dense_variables(model.config.model))
    model.dense.emplace(name, core::Tensor(shape, 0.5f));
  model.rows = core::Tensor(core::Shape{2, 3});
  model.keys = {1, -7};
  for (bool bf16 : {false, true}) {
    model.config.bf16 = bf16;
    if (auto st = core::write_ctr_export(ckpt, model); !st) return 1;
    put("fuzz_export", bf16 ? "bf16" : "float32", file_bytes(ckpt));
    std::filesystem::remove(ckpt);
  }

  core::Example e;
  e.features = {0.5f, 1.5f};
  e.ids = {3, 17, 400};
  e.values = {1.0f, 0.5f, 2.0f};
  e.label = 1.0f;
  put("fuzz_data_files", "tfrecord",
      core::frame_record(core::encode_example(e)) + core::frame_record(core::encode_example(e)));
  put("fuzz_data_files", "libsvm", "1 3:1 17:0.5 400:2\n0 1:1\n");
  put("fuzz_data_files", "criteo", "1\t5\t\t3\tab12\tcd34\n0\t\t2\t\tffff\t\n");
  put("fuzz_data_files", "csv", "a,b,label\n0.5,1.5,1\n2,3,0\n");
  put("fuzz_data_files", "idx",
      std::string("\0\0\x08\x03\0\0\0\x01\0\0\0\x02\0\0\0\x02", 16) +
          std::string("\x01\x02\x03\x04", 4));

  put("fuzz_closure_args", "tuple", [] {
    auto v = encode_value(std::make_tuple(int64_t{3}, 2.5, std::string("step")));
    return std::string(v.begin(), v.end());
  }());
  put("fuzz_closure_args", "vectors", [] {
    auto v = encode_value(std::make_tuple(std::vector<float>{1, 2}, std::vector<int64_t>{3}));
    return std::string(v.begin(), v.end());
  }());

  // A small .keras file: a layer's kernel, an optimizer's step count, an asset.
  core::keras::KerasFile keras;
  keras.config = {{"class_name", "Sequential"},
                  {"config", {{"name", "s"}, {"layers", nlohmann::json::array()}}}};
  keras.metadata = {{"keras_version", "3.15.1"}};
  keras.weights["layers/dense/vars/0"] = core::Tensor(core::Shape{2, 2}, {1, 2, 3, 4});
  keras.weights["optimizer/vars/0"] =
      core::Tensor(core::Shape{}, core::DType::int64, core::Device::cpu());
  keras.weight_groups = {{"layers/dense/vars", "dense"}, {"optimizer/vars", "adam"}, {"vars", "s"}};
  keras.assets["assets/layers/string_lookup/vocabulary.txt"] = "[UNK]\na\nb";
  auto keras_bytes = core::keras::write_keras_bytes(keras, "seed.keras");
  if (!keras_bytes) return 1;
  put("fuzz_keras", "model.keras", *keras_bytes);

  // A Functional model of two inputs, a shared layer, an Embedding and a compile_config.
  put("fuzz_keras_model", "functional.json", R"({"class_name": "Functional", "config": {
    "name": "m", "layers": [
      {"class_name": "InputLayer", "name": "a", "config": {"batch_shape": [null, 3], "name": "a"}},
      {"class_name": "InputLayer", "name": "ids", "config": {"batch_shape": [null, 2], "dtype": "int64", "name": "ids"}},
      {"class_name": "Embedding", "name": "emb", "config": {"name": "emb", "input_dim": 10, "output_dim": 3},
       "inbound_nodes": [[["ids", 0, 0, {}]]]},
      {"class_name": "GlobalAveragePooling1D", "name": "pool", "config": {"name": "pool"},
       "inbound_nodes": [[["emb", 0, 0, {}]]]},
      {"class_name": "Dense", "name": "shared", "config": {"name": "shared", "units": 3},
       "inbound_nodes": [[["a", 0, 0, {}]], [["pool", 0, 0, {}]]]},
      {"class_name": "Add", "name": "add", "config": {"name": "add"},
       "inbound_nodes": [[["shared", 0, 0, {}], ["shared", 1, 0, {}]]]},
      {"class_name": "Dense", "name": "out", "config": {"name": "out", "units": 1, "activation": "sigmoid"},
       "inbound_nodes": [[["add", 0, 0, {}]]]}],
    "input_layers": [["a", 0, 0], ["ids", 0, 0]], "output_layers": [["out", 0, 0]]},
    "compile_config": {"optimizer": {"class_name": "Adam", "config": {"learning_rate": 0.001}},
                       "loss": "binary_crossentropy", "metrics": ["auc"]}})");
  // Keras operations as nodes (keras.ops on symbolic tensors): constants, lists, slices.
  put("fuzz_keras_model", "ops.json", R"({"class_name": "Functional", "config": {
    "name": "m", "layers": [
      {"class_name": "InputLayer", "name": "x", "config": {"batch_shape": [null, 3, 4], "name": "x"}},
      {"module": "keras.src.ops.numpy", "class_name": "ExpandDims", "name": "e",
       "config": {"name": "e", "axis": 1}, "inbound_nodes": [{"args": [{"class_name":
       "__keras_tensor__", "config": {"keras_history": ["x", 0, 0]}}], "kwargs": {}}]},
      {"module": "keras.src.ops.numpy", "class_name": "Add", "name": "add",
       "config": {"name": "add"}, "inbound_nodes": [{"args": [{"class_name": "__keras_tensor__",
       "config": {"keras_history": ["e", 0, 0]}}, {"class_name": "__numpy__", "config":
       {"value": [1, 2, 3, 4], "dtype": "float32"}}], "kwargs": {}}]},
      {"module": "keras.src.ops.numpy", "class_name": "GetItem", "name": "g",
       "config": {"name": "g"}, "inbound_nodes": [{"args": [{"class_name": "__keras_tensor__",
       "config": {"keras_history": ["add", 0, 0]}}, [{"class_name": "__slice__", "config":
       {"start": null, "stop": null, "step": null}}, 0, {"class_name": "__slice__", "config":
       {"start": 1, "stop": null, "step": -1}}]], "kwargs": {}}]},
      {"module": "keras.src.ops.numpy", "class_name": "Einsum", "name": "es",
       "config": {"name": "es", "subscripts": "bij,bkj->bik"}, "inbound_nodes": [{"args": [
       {"class_name": "__keras_tensor__", "config": {"keras_history": ["g", 0, 0]}},
       {"class_name": "__keras_tensor__", "config": {"keras_history": ["g", 0, 0]}}], "kwargs": {}}]},
      {"module": "keras.src.ops.numpy", "class_name": "Sum", "name": "s",
       "config": {"name": "s", "axis": [1, 2], "keepdims": false}, "inbound_nodes": [{"args": [
       {"class_name": "__keras_tensor__", "config": {"keras_history": ["es", 0, 0]}}], "kwargs": {}}]}],
    "input_layers": [["x", 0, 0]], "output_layers": [["s", 0, 0]]}})");
  // An Example of the fuzz target's specs (ids [3], x, word, label), then CSV and Criteo text.
  {
    std::vector<core::FeatureSpec> s = {{"ids", core::ColumnKind::ints, {3}},
                                        {"x", core::ColumnKind::floats, {}},
                                        {"word", core::ColumnKind::strings, {}},
                                        {"label", core::ColumnKind::floats, {}}};
    auto columns = core::make_columns(s, 1);
    columns[0].ints = {1, 2, 3};
    columns[1].floats = {0.5f};
    columns[2].strings = {"w"};
    columns[3].floats = {1.0f};
    core::finish_columns(columns, s, 1);
    put("fuzz_named_input", "example", std::string(1, '\0') + core::encode_tf_example(columns, 0));
  }
  put("fuzz_named_input", "csv", "\x01ids,x,word,label\n1,0.5,\"a, b\",1\n");
  put("fuzz_named_input", "criteo", std::string("\x02") + "1\t5\t\t3\tab12\tcd34\n");

  caf::actor_system_config cfg;
  troupe::net::add_wire_types(cfg);
  caf::actor_system sys{cfg};
  auto serialized = [&](auto value) {
    std::vector<char> buf;
    caf::binary_serializer sink{sys, buf};
    (void)sink(value);
    return std::string(buf.begin(), buf.end());
  };
  put("fuzz_caf_messages", "request", serialized(request));
  put("fuzz_caf_messages", "message",
      serialized(caf::make_message(net::push_atom::value, uint64_t{1}, std::string("w#0"),
                                   net::WireTensor{{2}, {1, 2}})));
  std::cout << "{\"ok\":true,\"program\":\"fuzz_seeds\",\"dir\":\"" << dir << "\"}\n";
  return 0;
}
