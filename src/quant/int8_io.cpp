// save_int8_model / load_int8_model: the file format of include/mixp/quant/int8_model.h.
#include <fmt/format.h>

#include <cstring>
#include <nlohmann/json.hpp>

#include "mixp/io/safetensors.h"
#include "mixp/quant/int8_model.h"
#include "mixp/tensor/factories.h"
#include "quant/model_file.h"

namespace mixp::quant {

namespace {

constexpr const char* kMetaKey = "mixp.int8_model";
constexpr const char* kFormat = "mixp-int8";
constexpr int kVersion = 1;

template <class T>
SafeTensor make(const std::string& name, DType dt, std::vector<int64_t> shape, const T* data,
                size_t n) {
  return detail::make_tensor(name, dt, std::move(shape), data, n * sizeof(T));
}

void add_weight_layer(SafeTensorsFile& f, const Int8WeightLayerParams& p) {
  const std::vector<int64_t> ws(p.weight.shape().begin(), p.weight.shape().end());
  const int64_t O = ws[0];
  f.tensors.push_back(make(p.name + ".weight", DType::int8, ws, p.weight.data<int8_t>(),
                           static_cast<size_t>(p.weight.numel())));
  f.tensors.push_back(make(p.name + ".weight_scale", DType::fp32, {O}, p.weight_scale.data(),
                           p.weight_scale.size()));
  f.tensors.push_back(make(p.name + ".bias", DType::fp32, {O}, p.bias.data(), p.bias.size()));
  f.tensors.push_back(make(p.name + ".input_scale", DType::fp32, {1}, &p.input.scale, 1));
  f.tensors.push_back(
      make(p.name + ".input_zero_point", DType::int32, {1}, &p.input.zero_point, 1));
  if (p.output) {
    f.tensors.push_back(make(p.name + ".output_scale", DType::fp32, {1}, &p.output->scale, 1));
    f.tensors.push_back(
        make(p.name + ".output_zero_point", DType::int32, {1}, &p.output->zero_point, 1));
  }
}

[[noreturn]] void bad(const std::filesystem::path& path, const std::string& what) {
  detail::bad_model_file(path, "int8 model", what);
}

const SafeTensor& need(const SafeTensorsFile& f, const std::filesystem::path& path,
                       const std::string& name, DType dt, int64_t numel) {
  return detail::need_tensor(f, path, "int8 model", name, dt, numel);
}

template <class T>
T scalar(const SafeTensor& t) {
  T v;
  std::memcpy(&v, t.data.data(), sizeof(T));
  return v;
}

QParams u8_params(float scale, int32_t zp, bool reduce_range) {
  return QParams{scale, zp, 0, reduce_range ? 127 : 255};
}

Int8WeightLayerParams read_weight_layer(const SafeTensorsFile& f, const std::filesystem::path& path,
                                        const nlohmann::json& l) {
  Int8WeightLayerParams p;
  p.name = l.at("name").get<std::string>();
  const SafeTensor& w = need(f, path, p.name + ".weight", DType::int8, -1);
  if (w.shape.empty() || w.shape[0] <= 0) bad(path, "tensor '" + p.name + ".weight' has no rows");
  const int64_t O = w.shape[0];
  p.weight = empty(Shape(w.shape.begin(), w.shape.end()), {.dtype = DType::int8});
  std::memcpy(p.weight.data_ptr(), w.data.data(), w.data.size());
  const SafeTensor& ws = need(f, path, p.name + ".weight_scale", DType::fp32, O);
  const SafeTensor& b = need(f, path, p.name + ".bias", DType::fp32, O);
  p.weight_scale.resize(static_cast<size_t>(O));
  p.bias.resize(static_cast<size_t>(O));
  std::memcpy(p.weight_scale.data(), ws.data.data(), ws.data.size());
  std::memcpy(p.bias.data(), b.data.data(), b.data.size());
  const bool rr = l.value("reduce_range", false);
  p.input = u8_params(scalar<float>(need(f, path, p.name + ".input_scale", DType::fp32, 1)),
                      scalar<int32_t>(need(f, path, p.name + ".input_zero_point", DType::int32, 1)),
                      l.value("input_reduce_range", rr));
  if (l.value("output_u8", false)) {
    p.output =
        u8_params(scalar<float>(need(f, path, p.name + ".output_scale", DType::fp32, 1)),
                  scalar<int32_t>(need(f, path, p.name + ".output_zero_point", DType::int32, 1)),
                  l.value("output_reduce_range", rr));
  }
  p.relu = l.value("relu", false);
  if (l.value("kind", "") == "conv2d") {
    p.conv.stride_h = p.conv.stride_w = l.value("stride", int64_t(1));
    p.conv.pad_h = p.conv.pad_w = l.value("padding", int64_t(0));
  }
  return p;
}

}  // namespace

void save_int8_model(const Int8Model& m, const std::filesystem::path& path) {
  SafeTensorsFile f;
  nlohmann::ordered_json layers = nlohmann::ordered_json::array();
  for (const auto& l : m.layers()) {
    const Int8LayerSpec s = l->spec();
    nlohmann::ordered_json j;
    j["name"] = s.name;
    j["kind"] = s.kind;
    if (const auto* q = dynamic_cast<const Int8Quantize*>(l.get())) {
      const QParams& p = q->qparams();
      f.tensors.push_back(make(s.name + ".scale", DType::fp32, {1}, &p.scale, 1));
      f.tensors.push_back(make(s.name + ".zero_point", DType::int32, {1}, &p.zero_point, 1));
      j["reduce_range"] = p.qmax == 127;
    } else if (const auto* lin = dynamic_cast<const Int8Linear*>(l.get())) {
      add_weight_layer(f, lin->params());
    } else if (const auto* conv = dynamic_cast<const Int8Conv2d*>(l.get())) {
      add_weight_layer(f, conv->params());
      j["stride"] = s.stride;
      j["padding"] = s.padding;
    } else if (s.kind == "max_pool2d") {
      j["kernel"] = s.kernel;
      j["stride"] = s.stride;
      j["padding"] = s.padding;
    }
    if (s.kind == "linear" || s.kind == "conv2d") {
      const auto& p = s.kind == "linear" ? dynamic_cast<const Int8Linear*>(l.get())->params()
                                         : dynamic_cast<const Int8Conv2d*>(l.get())->params();
      j["relu"] = s.relu;
      j["output_u8"] = s.output_u8;
      j["input_reduce_range"] = p.input.qmax == 127;
      if (p.output) j["output_reduce_range"] = p.output->qmax == 127;
    }
    layers.push_back(j);
  }
  nlohmann::ordered_json meta;
  meta["format"] = kFormat;
  meta["version"] = kVersion;
  meta["layers"] = layers;
  f.metadata[kMetaKey] = meta.dump();
  f.metadata["format"] = kFormat;
  write_safetensors(path, f);
}

std::shared_ptr<Int8Model> load_int8_model(const std::filesystem::path& path) {
  return load_int8_model(read_safetensors(path), path);
}

std::shared_ptr<Int8Model> load_int8_model(const SafeTensorsFile& f,
                                           const std::filesystem::path& path) {
  const nlohmann::json meta =
      detail::read_model_meta(f, path, "int8 model", kMetaKey, kFormat, kVersion);
  auto model = std::make_shared<Int8Model>();
  try {
    for (const auto& l : meta.at("layers")) {
      const std::string kind = l.at("kind").get<std::string>();
      const std::string nm = l.at("name").get<std::string>();
      if (kind == "quantize") {
        const QParams q =
            u8_params(scalar<float>(need(f, path, nm + ".scale", DType::fp32, 1)),
                      scalar<int32_t>(need(f, path, nm + ".zero_point", DType::int32, 1)),
                      l.value("reduce_range", false));
        model->add_layer(std::make_unique<Int8Quantize>(nm, q));
      } else if (kind == "linear") {
        model->add_layer(std::make_unique<Int8Linear>(read_weight_layer(f, path, l)));
      } else if (kind == "conv2d") {
        model->add_layer(std::make_unique<Int8Conv2d>(read_weight_layer(f, path, l)));
      } else if (kind == "max_pool2d") {
        model->add_layer(std::make_unique<Int8MaxPool2d>(nm, l.at("kernel").get<int64_t>(),
                                                         l.at("stride").get<int64_t>(),
                                                         l.at("padding").get<int64_t>()));
      } else if (kind == "flatten") {
        model->add_layer(std::make_unique<Int8Flatten>(nm));
      } else {
        bad(path, "unknown layer kind '" + kind + "'");
      }
    }
  } catch (const nlohmann::json::exception& e) {
    bad(path, std::string("malformed layer list: ") + e.what());
  } catch (const std::invalid_argument& e) {
    bad(path, e.what());
  }
  return model;
}

}  // namespace mixp::quant
