// save_packed_model / load_packed_model: the file format of include/mixp/quant/lowbit_model.h.
#include <fmt/format.h>

#include <cstring>
#include <nlohmann/json.hpp>

#include "mixp/io/safetensors.h"
#include "mixp/quant/lowbit_model.h"
#include "mixp/tensor/factories.h"
#include "quant/model_file.h"

namespace mixp::quant {

namespace {

constexpr const char* kMetaKey = "mixp.packed_model";
constexpr const char* kFormat = "mixp-packed";
constexpr int kVersion = 1;

using detail::make_tensor;

SafeTensor f32(const std::string& name, const Tensor& t) {
  const Tensor c = t.contiguous();
  return make_tensor(name, DType::fp32, {c.numel()}, c.data<float>(),
                     static_cast<size_t>(c.nbytes()));
}

[[noreturn]] void bad(const std::filesystem::path& path, const std::string& what) {
  detail::bad_model_file(path, "packed model", what);
}

const SafeTensor& need(const SafeTensorsFile& f, const std::filesystem::path& path,
                       const std::string& name, DType dt, int64_t numel) {
  return detail::need_tensor(f, path, "packed model", name, dt, numel);
}

Tensor read_f32(const SafeTensorsFile& f, const std::filesystem::path& path,
                const std::string& name, int64_t numel) {
  const SafeTensor& t = need(f, path, name, DType::fp32, numel);
  Tensor out = empty(Shape{numel}, {.dtype = DType::fp32});
  std::memcpy(out.data<float>(), t.data.data(), t.data.size());
  return out;
}

nlohmann::json act_json(const ActCodeParams& a) {
  return {{"act_kind", static_cast<int>(a.kind)}, {"bits", a.bits}, {"scale", a.scale}};
}

ActCodeParams act_from(const nlohmann::json& j) {
  ActCodeParams a;
  const int k = j.at("act_kind").get<int>();
  if (k < 0 || k > 2) throw std::invalid_argument(fmt::format("activation kind {} unknown", k));
  a.kind = static_cast<ActCodeKind>(k);
  a.bits = j.at("bits").get<int>();
  a.scale = j.at("scale").get<float>();
  if (a.bits < 1 || a.bits > 8 || !(a.scale > 0.0f)) {
    throw std::invalid_argument(
        fmt::format("activation with {} bits and scale {} is not valid", a.bits, a.scale));
  }
  return a;
}

}  // namespace

void save_packed_model(const PackedModel& m, const std::filesystem::path& path) {
  SafeTensorsFile f;
  nlohmann::json steps = nlohmann::json::array();
  for (const PackedStep& s : m.steps()) {
    nlohmann::json j{{"kind", s.kind}, {"name", s.name}};
    if (s.kind == "input" || s.kind == "act") {
      j.update(act_json(s.act));
      j["relu"] = s.relu;
    } else if (s.kind == "layer") {
      const int64_t K = s.in * s.kernel * s.kernel;
      const int64_t rb = packed_row_bytes(K, s.scheme);
      j.update({{"scheme", std::string(name(s.scheme))},
                {"conv", s.conv},
                {"out", s.out},
                {"in", s.in},
                {"kernel", s.kernel},
                {"stride", s.stride},
                {"padding", s.padding},
                {"input_scale", s.input_scale},
                {"input_kind", static_cast<int>(s.input_kind)},
                {"bias", s.bias.defined()}});
      std::vector<int64_t> shape{s.out, rb};
      if (s.scheme == LowBitScheme::ternary) shape.insert(shape.begin(), 2);
      f.tensors.push_back(make_tensor(s.name + ".weight", DType::uint8, shape, s.packed.data(),
                               s.packed.size()));
      f.tensors.push_back(make_tensor(s.name + ".weight_scale", DType::fp32, {s.out},
                               s.weight_scale.data(), 4 * s.weight_scale.size()));
      if (s.bias.defined()) f.tensors.push_back(f32(s.name + ".bias", s.bias));
    } else if (s.kind == "batch_norm") {
      j.update({{"eps", s.eps}, {"momentum", s.momentum}, {"channels", s.running_mean.numel()},
                {"affine", s.gamma.defined()}});
      f.tensors.push_back(f32(s.name + ".running_mean", s.running_mean));
      f.tensors.push_back(f32(s.name + ".running_var", s.running_var));
      if (s.gamma.defined()) {
        f.tensors.push_back(f32(s.name + ".weight", s.gamma));
        f.tensors.push_back(f32(s.name + ".bias", s.beta));
      }
    } else if (s.kind == "max_pool2d") {
      j.update({{"kernel", s.pool_kernel}, {"stride", s.pool_stride}, {"padding", s.pool_padding}});
    }
    steps.push_back(j);
  }
  nlohmann::json meta{{"format", kFormat}, {"version", kVersion}, {"steps", steps}};
  f.metadata[kMetaKey] = meta.dump();
  f.metadata["format"] = kFormat;
  write_safetensors(path, f);
}

std::shared_ptr<PackedModel> load_packed_model(const std::filesystem::path& path) {
  return load_packed_model(read_safetensors(path), path);
}

std::shared_ptr<PackedModel> load_packed_model(const SafeTensorsFile& f,
                                               const std::filesystem::path& path) {
  const nlohmann::json meta =
      detail::read_model_meta(f, path, "packed model", kMetaKey, kFormat, kVersion);
  auto model = std::make_shared<PackedModel>();
  try {
    for (const auto& j : meta.at("steps")) {
      PackedStep s;
      s.kind = j.at("kind").get<std::string>();
      s.name = j.at("name").get<std::string>();
      if (s.kind == "input" || s.kind == "act") {
        s.act = act_from(j);
        s.relu = j.at("relu").get<bool>();
      } else if (s.kind == "layer") {
        s.scheme = parse_lowbit_scheme(j.at("scheme").get<std::string>());
        s.conv = j.at("conv").get<bool>();
        s.out = j.at("out").get<int64_t>();
        s.in = j.at("in").get<int64_t>();
        s.kernel = j.at("kernel").get<int64_t>();
        s.stride = j.at("stride").get<int64_t>();
        s.padding = j.at("padding").get<int64_t>();
        s.input_scale = j.at("input_scale").get<float>();
        const int ik = j.at("input_kind").get<int>();
        if (ik < 0 || ik > 2 || s.out <= 0 || s.in <= 0 || s.kernel <= 0 || s.stride <= 0 ||
            s.padding < 0 || s.out > (int64_t{1} << 24) || s.in > (int64_t{1} << 24) ||
            s.kernel > 64) {
          bad(path, "layer '" + s.name + "' has invalid sizes");
        }
        s.input_kind = static_cast<ActCodeKind>(ik);
        const int64_t K = s.in * s.kernel * s.kernel;
        const int64_t bytes =
            (s.scheme == LowBitScheme::ternary ? 2 : 1) * s.out * packed_row_bytes(K, s.scheme);
        const SafeTensor& w = need(f, path, s.name + ".weight", DType::uint8, bytes);
        s.packed.assign(reinterpret_cast<const uint8_t*>(w.data.data()),
                        reinterpret_cast<const uint8_t*>(w.data.data()) + w.data.size());
        const SafeTensor& ws = need(f, path, s.name + ".weight_scale", DType::fp32, s.out);
        s.weight_scale.resize(static_cast<size_t>(s.out));
        std::memcpy(s.weight_scale.data(), ws.data.data(), ws.data.size());
        if (j.at("bias").get<bool>()) s.bias = read_f32(f, path, s.name + ".bias", s.out);
      } else if (s.kind == "batch_norm") {
        const int64_t c = j.at("channels").get<int64_t>();
        s.eps = j.at("eps").get<double>();
        s.momentum = j.at("momentum").get<double>();
        s.running_mean = read_f32(f, path, s.name + ".running_mean", c);
        s.running_var = read_f32(f, path, s.name + ".running_var", c);
        if (j.at("affine").get<bool>()) {
          s.gamma = read_f32(f, path, s.name + ".weight", c);
          s.beta = read_f32(f, path, s.name + ".bias", c);
        }
      } else if (s.kind == "max_pool2d") {
        s.pool_kernel = j.at("kernel").get<int64_t>();
        s.pool_stride = j.at("stride").get<int64_t>();
        s.pool_padding = j.at("padding").get<int64_t>();
        if (s.pool_kernel <= 0 || s.pool_stride <= 0 || s.pool_padding < 0) {
          bad(path, "max_pool2d '" + s.name + "' has invalid sizes");
        }
      } else if (s.kind != "flatten") {
        bad(path, "unknown step kind '" + s.kind + "'");
      }
      model->add_step(std::move(s));
    }
  } catch (const nlohmann::json::exception& e) {
    bad(path, std::string("malformed step list: ") + e.what());
  } catch (const std::invalid_argument& e) {
    bad(path, e.what());
  }
  return model;
}

}  // namespace mixp::quant
