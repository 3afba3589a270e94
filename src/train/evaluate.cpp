// Evaluation, gradient norms and the `train --json` object.
#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "mixp/autograd/grad_mode.h"
#include "mixp/backend/backend.h"
#include "mixp/io/quantized_safetensors.h"
#include "mixp/io/safetensors.h"
#include "mixp/ops/ops.h"
#include "mixp/quant/int8_model.h"
#include "mixp/quant/lowbit_model.h"
#include "mixp/quant/weight_only.h"
#include "mixp/train/checkpoint.h"
#include "trainer_impl.h"

namespace mixp::train {

namespace detail {

namespace {
// Number of rows of `logits` [N, C] whose largest value is at the target's index (the first
// maximum wins on ties, as torch.argmax does).
template <class T, class L>
int64_t count_correct(const Tensor& logits, const Tensor& target) {
  const int64_t n = logits.size(0), c = logits.size(1);
  const T* x = logits.data<T>();
  const L* y = target.data<L>();
  int64_t correct = 0;
  for (int64_t i = 0; i < n; ++i) {
    const T* row = x + i * c;
    int64_t best = 0;
    for (int64_t j = 1; j < c; ++j)
      if (row[j] > row[best]) best = j;
    correct += best == int64_t(y[i]);
  }
  return correct;
}

template <class T>
int64_t count_correct_as(const Tensor& logits, const Tensor& target) {
  const Tensor y = target.contiguous();
  return y.dtype() == DType::int64 ? count_correct<T, int64_t>(logits, y)
                                   : count_correct<T, int32_t>(logits, y);
}

// Whether `output` holds class scores [N, C] for `target`'s [N] class indices.
bool is_classification(const Tensor& output, const Tensor& target) {
  return output.dim() == 2 && target.dim() == 1 && output.size(0) == target.size(0) &&
         (target.dtype() == DType::int32 || target.dtype() == DType::int64);
}

}  // namespace

EvalResult evaluate_model(nn::Module& model, DataSource& source, const PrecisionRecipe& recipe,
                          bool language_model, const LossFunction& loss_fn,
                          dist::ProcessGroup* group) {
  NoGradGuard ng;
  const bool was_training = model.is_training();
  model.train(false);
  EvalResult r;
  double loss_sum = 0;
  int64_t rows = 0, correct = 0, classified = 0;
  bool accuracy = !language_model;
  for (int64_t i = 0, n = source.eval_batches(); i < n; ++i) {
    const Batch b = source.eval_batch(i);
    Tensor output;
    Tensor loss;
    {
      auto scope = recipe.forward_scope();
      output = model(b.input);  // through the recipe's forward wrappers
      loss = loss_fn(output, b.target);
    }
    // The loss is a mean over the targets (cross-entropy: over the rows, gpt's B * T tokens).
    const int64_t n_rows = b.target.numel();
    loss_sum += loss.item() * double(n_rows);
    rows += n_rows;
    accuracy = accuracy && is_classification(output, b.target);
    if (accuracy) {
      // Counted on the host: the scores and targets are copied there explicitly (tensor.h,
      // to(Device); on the cpu device the tensors themselves).
      const Tensor l = output.contiguous().to(Device::cpu());
      const Tensor t = b.target.to(Device::cpu());
      correct += l.dtype() == DType::fp64
                     ? count_correct_as<double>(l, t)
                     : count_correct_as<float>(l.dtype() == DType::fp32 ? l : l.to(DType::fp32), t);
      classified += output.size(0);
    }
    r.samples += b.samples;
  }
  model.train(was_training);
  if (group && group->size() > 1) {
    // Each rank evaluated its share of the batches (sharded_source.h): sum over the ranks.
    std::vector<double> v{loss_sum,           double(rows),      double(correct),
                          double(classified), double(r.samples), accuracy ? 1.0 : 0.0};
    group->allreduce(std::span<double>(v.data(), 5), dist::ReduceOp::sum);
    group->allreduce(std::span<double>(v.data() + 5, 1), dist::ReduceOp::min);
    loss_sum = v[0];
    rows = int64_t(v[1]);
    correct = int64_t(v[2]);
    classified = int64_t(v[3]);
    r.samples = int64_t(v[4]);
    accuracy = v[5] > 0;
  }
  r.loss = rows > 0 ? loss_sum / double(rows) : std::nan("");
  if (accuracy) {
    r.accuracy = classified > 0 ? double(correct) / double(classified) : std::nan("");
  }
  return r;
}

}  // namespace detail

EvalResult evaluate_checkpoint(const std::filesystem::path& dir, const std::string& precision,
                               const std::string& data) {
  EvalOptions o;
  o.precision = precision;
  o.data = data;
  return evaluate_checkpoint(dir, o);
}

namespace {
double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
bool has_block_tensors(const SafeTensorsFile& f) {
  for (const auto& t : f.tensors) {
    if (is_block_tensor(f, t.name)) return true;
  }
  return false;
}
// Every logical tensor of a `mixp convert` file, decoded to fp32.
SafeTensorsFile decoded(const SafeTensorsFile& f) {
  SafeTensorsFile out;
  for (const std::string& name : logical_tensor_names(f)) {
    std::vector<int64_t> shape;
    const std::vector<float> v = read_tensor_f32(f, name, &shape);
    SafeTensor t;
    t.name = name;
    t.dtype = DType::fp32;
    t.shape = shape;
    t.data.resize(v.size() * sizeof(float));
    std::memcpy(t.data.data(), v.data(), t.data.size());
    out.tensors.push_back(std::move(t));
  }
  return out;
}
int64_t tensor_bytes(const nn::Module& m) {
  int64_t b = 0;
  for (const auto& [n, t] : m.named_parameters()) b += static_cast<int64_t>(t.nbytes());
  return b;
}
}  // namespace

EvalResult evaluate_checkpoint(const std::filesystem::path& dir, const EvalOptions& opt) {
  // Read once and verified: the weights evaluated are those of the state.json read.
  const CheckpointFiles ck = read_checkpoint(dir);
  TrainConfig c = ck.config;
  const std::string& precision = opt.precision;
  const auto int8_file = dir / kInt8ModelFile;
  const bool has_int8 = ck.has(kInt8ModelFile);
  const bool run_int8 =
      precision == "int8" || (precision.empty() && has_int8 && opt.weights.empty());
  // A low-bit QAT checkpoint's packed model (quant/lowbit_model.h), run like the int8 one.
  const bool has_packed = ck.has(kPackedModelFile);
  const bool run_packed =
      precision == "packed" || (precision.empty() && has_packed && opt.weights.empty());
  if (run_packed && !has_packed) {
    throw ConfigError(fmt::format(
        "checkpoint {} has no packed model ({}); train with --precision int4-qat, int2-qat, "
        "ternary, binary or binary-act",
        dir.string(), kPackedModelFile));
  }
  if (run_packed && !opt.weights.empty()) {
    throw ConfigError(
        "--weights quantizes the weights of a floating-point model; the packed "
        "model's weights are low-bit already");
  }
  if (precision == "int8" && !opt.weights.empty()) {
    throw ConfigError(
        "--weights quantizes the weights of a floating-point model; --precision int8 "
        "runs the checkpoint's int8 model, whose weights are int8 already");
  }
  if (run_int8 && !has_int8) {
    throw ConfigError(fmt::format(
        "checkpoint {} has no int8 model ({}); train with --precision int8-qat or run `mixp "
        "quantize --checkpoint {} --calibrate N --out DIR` first",
        dir.string(), kInt8ModelFile, dir.string()));
  }
  // Per-layer rules belong to the precision they were trained with.
  if (!precision.empty() && precision != c.precision) c.layer_precision.clear();
  if (!precision.empty() && precision != "int8" && precision != "packed") c.precision = precision;
  if (run_int8 || run_packed) {
    c.precision = "fp32";  // the loop's recipe; the int8 model needs none
    c.layer_precision.clear();
  }
  if (!opt.data.empty()) c.data = opt.data;
  RunParts parts = build_run(c, RunPurpose::evaluate, /*with_model=*/!run_int8 && !run_packed);
  c = parts.config;
  const bool lm = is_language_model(c.model.name);
  const auto& recipe = parts.recipe;
  auto& source = parts.data;
  std::shared_ptr<nn::Module> model;
  EvalResult r;
  if (run_packed) {
    auto m = quant::load_packed_model(ck.safetensors(kPackedModelFile), dir / kPackedModelFile);
    r.weight_bytes = m->weight_bytes();
    r.evaluated = "packed";
    model = m;
  } else if (run_int8) {
    auto m = quant::load_int8_model(ck.safetensors(kInt8ModelFile), int8_file);
    r.weight_bytes = m->weight_bytes();
    r.evaluated = "int8";
    model = m;
  } else {
    model = parts.model;
    const auto file = dir / kModelFile;
    const SafeTensorsFile raw = ck.safetensors(kModelFile);
    if (opt.compute != "bf16" && opt.compute != "fp32") {
      throw ConfigError("--compute must be bf16 or fp32, got '" + opt.compute + "'");
    }
    const DType compute = opt.compute == "bf16" ? DType::bf16 : DType::fp32;
    r.evaluated = c.precision;
    std::string stored_4bit;  // "nf4" / "int4" when the file holds 4-bit Linear weights
    if (has_block_tensors(raw)) {
      // Re-encoded by `mixp convert`: every tensor decoded to fp32 for the model, then the Linear
      // weights stored as nf4/int4 keep their codes (weight-only 4-bit layers).
      SafeTensorsFile dec;
      try {
        dec = decoded(raw);
      } catch (const std::exception& e) {
        throw TrainError(file.string() + ": " + e.what());  // the decoder names the tensor only
      }
      load_module_state(*model, dec, file.string());
      try {
        if (quant::load_weights_4bit(*model, raw, compute, &stored_4bit) == 0) stored_4bit.clear();
      } catch (const std::invalid_argument& e) {
        throw TrainError(file.string() + ": " + e.what());
      }
      if (!stored_4bit.empty() && !opt.weights.empty() && opt.weights != stored_4bit) {
        throw ConfigError(
            fmt::format("{} holds {} Linear weights (mixp convert); --weights {} "
                        "cannot re-quantize them: leave --weights out",
                        file.string(), stored_4bit, opt.weights));
      }
      r.evaluated = stored_4bit.empty() ? c.precision + " (tensors decoded from mixp convert)"
                                        : fmt::format("{} weights from mixp convert, {} compute",
                                                      stored_4bit, opt.compute);
    } else {
      // The weights against the recipe state.json records; the model built here is that
      // recipe's when the evaluation runs in it (same precision and per-layer rules).
      const bool recorded = c.precision == ck.config.precision &&
                            c.layer_precision == ck.config.layer_precision;
      check_checkpoint_weights(ck, raw, recorded ? model.get() : nullptr);
      load_module_state(*model, raw, file.string());
    }
    if (!opt.weights.empty() && stored_4bit.empty()) {
      quant::WeightOnlyOptions wo;
      wo.double_quant = opt.double_quant;
      wo.compute = compute;
      try {
        wo.kind = quant::parse_block4(opt.weights);
        quant::quantize_weights_4bit(*model, wo);
      } catch (const std::invalid_argument& e) {
        throw ConfigError(e.what());
      }
      r.evaluated = fmt::format("{} weights{}, {} compute", opt.weights,
                                opt.double_quant ? " (double quantization)" : "", opt.compute);
    }
    r.weight_bytes = tensor_bytes(*model);
    for (const auto& [n, m] : model->named_modules()) {
      if (const auto* w = dynamic_cast<const quant::WeightOnlyLinear*>(m)) {
        r.weight_bytes += w->weight_bytes();  // codes and scales
        for (const auto& [bn, b] : w->named_buffers()) r.weight_bytes += int64_t(b.nbytes());
      }
    }
    if (opt.weights.empty() && stored_4bit.empty()) {
      if (auto inf = recipe->inference_model(*model)) {
        model = inf;
        r.evaluated = (dynamic_cast<const quant::PackedModel*>(inf.get()) ? "packed" : "int8") +
                      std::string(" (converted from the ") + c.precision + " model)";
      }
    }
  }
  const auto t0 = std::chrono::steady_clock::now();
  const EvalResult e = detail::evaluate_model(*model, *source, *recipe, lm);
  r.time_s = seconds_since(t0);
  r.accuracy = e.accuracy;
  r.loss = e.loss;
  r.samples = e.samples;
  return r;
}

namespace {
nlohmann::ordered_json opt_number(const std::optional<double>& v) {
  return v && std::isfinite(*v) ? nlohmann::ordered_json(*v) : nlohmann::ordered_json();
}
nlohmann::ordered_json finite_or_null(double v) {
  return std::isfinite(v) ? nlohmann::ordered_json(v) : nlohmann::ordered_json();
}
}  // namespace

std::string result_to_json(const TrainResult& r, int indent) {
  nlohmann::ordered_json j;
  j["model"] = r.model;
  j["precision"] = r.precision;
  j["optimizer"] = r.optimizer;
  j["data"] = r.data;
  j["steps"] = r.steps;
  j["steps_this_run"] = r.steps_this_run;
  j["skipped_steps"] = r.skipped_steps;
  j["skipped_steps_this_run"] = r.skipped_steps_this_run;
  j["loss_scale"] = r.loss_scale;
  j["recipe"] = r.recipe;
  if (!r.layer_precision.empty()) j["layer_precision"] = r.layer_precision;
  j["epochs"] = r.epochs;
  j["batch"] = r.batch;
  j["grad_accum"] = r.grad_accum;
  j["ms_per_step"] = r.ms_per_step;
  j["cpu_ms_per_step"] = r.cpu_ms_per_step;
  j["samples_per_s"] = r.samples_per_s;
  if (is_language_model(r.model) || r.tokens_per_s > 0) j["tokens_per_s"] = r.tokens_per_s;
  if (r.val_loss || is_language_model(r.model)) {
    j["val_loss"] = opt_number(r.val_loss);
  } else {
    j["test_accuracy"] = opt_number(r.test_accuracy);
    j["test_loss"] = opt_number(r.test_loss);
  }
  for (const auto& [k, v] : r.extra_metrics) {
    // Counts (trainable_parameters) as integers, like `parameters`.
    if (k.ends_with("parameters") && std::isfinite(v)) j[k] = int64_t(v);
    else j[k] = finite_or_null(v);
  }
  j["final_loss"] = finite_or_null(r.final_loss);
  j["trained"] = r.trained;  // docs/train.md "When a run did not train"
  if (!r.trained) j["not_trained"] = r.not_trained;
  j["peak_memory_bytes"] = r.peak_memory_bytes;
  j["peak_requested_bytes"] = r.peak_requested_bytes;
  j["peak_reserved_bytes"] = r.peak_reserved_bytes;
  j["memory_device"] = r.memory_device;
  j["peak_rss_bytes"] = r.peak_rss_bytes;
  j["energy_joules"] = opt_number(r.energy_joules);
  j["energy_source"] = r.energy_source;
  j["train_time_s"] = r.train_time_s;
  j["total_time_s"] = r.total_time_s;
  j["threads"] = r.threads;
  j["parameters"] = r.parameters;
  j["seed"] = r.seed;
  if (!r.saved_to.empty()) j["checkpoint"] = r.saved_to;
  if (r.ranks > 1) {
    j["ranks"] = r.ranks;
    j["hosts"] = r.hosts;
    auto per_host = nlohmann::json::array();
    for (const auto& [host, n] : r.ranks_per_host)
      per_host.push_back({{"host", host}, {"ranks", n}});
    j["ranks_per_host"] = per_host;
    j["threads_per_rank"] = r.threads;
    j["shared_memory"] = r.shared_memory;
    if (!r.shared_memory) j["shared_memory_note"] = r.shared_memory_note;
    j["gradient_transport"] = r.gradient_transport;
    j["global_batch"] = r.batch * r.ranks;
    j["grad_comm"] = r.grad_comm;
    j["comm_bytes_per_step"] = r.comm_bytes_per_step;
    if (r.zero == 3) {
      j["comm_param_bytes_per_step"] = r.comm_param_bytes_per_step;
      j["param_gather_ms_per_step"] = r.param_gather_ms_per_step;
      j["param_gather_wait_ms_per_step"] = r.param_gather_wait_ms_per_step;
      j["param_pack_ms_per_step"] = r.param_pack_ms_per_step;
      j["param_unpack_ms_per_step"] = r.param_unpack_ms_per_step;
      j["zero3_prefetch"] = r.zero3_prefetch;
      j["param_gathers_last_step"] = r.param_gathers_last_step;
      j["param_gathers_prefetched_last_step"] = r.param_gathers_prefetched_last_step;
      j["param_gathers_copy_only_last_step"] = r.param_gathers_copy_only_last_step;
      j["head_grads_deferred_last_step"] = r.head_grads_deferred_last_step;
      j["param_gathered_peak_bytes_last_step"] = r.param_gathered_peak_bytes_last_step;
    }
    j["comm_ms_per_step"] = r.comm_ms_per_step;
    j["comm_buckets"] = r.comm_buckets;
    j["comm_buckets_overlapped"] = r.comm_buckets_overlapped;
    j["zero"] = r.zero;
    j["optimizer_state_bytes"] = r.optimizer_state_bytes;
  }
  return j.dump(indent);
}

}  // namespace mixp::train
