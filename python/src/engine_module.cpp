// The engine side of `mixp._mixp` (docs/python.md): training runs for mixp.train (the library calls
// `mixp train` makes: train::config_from_json -> train::Trainer -> fit -> result_to_json, so the
// dict is the one --json prints), and mixp's FP8 pieces for `mixp.torch` (python/mixp/torch.py):
// the per-tensor cast
// of include/mixp/amp/fp8_quantize.h, TE's delayed-scaling state machine (amp::Fp8ScalingState,
// fp8_scaling.h) and, to check the PyTorch side against, mixp's own FP8 linear layer
// (amp::fp8_linear, fp8_linear.h). Nothing is re-implemented here: the fake quantization of a
// PyTorch tensor is the library's cast, bit for bit.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cmath>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "bindings.h"
#include "mixp/amp/fp8_linear.h"
#include "mixp/amp/fp8_quantize.h"
#include "mixp/amp/fp8_scaling.h"
#include "mixp/autograd/grad_mode.h"
#include "mixp/format/convert.h"
#include "mixp/format/dtype.h"
#include "mixp/study/plan_request.h"
#include "mixp/study/report.h"
#include "mixp/study/study_runner.h"
#include "mixp/train/callbacks.h"
#include "mixp/train/train_config.h"
#include "mixp/train/trainer.h"

namespace py = pybind11;

namespace mixp::python {
namespace {

DType fp8_dtype(const std::string& fmt) {
  const DType t = parse_dtype(fmt);
  if (t != DType::fp8_e4m3 && t != DType::fp8_e5m2) {
    throw std::invalid_argument("'" + fmt + "' is not an FP8 format (fp8_e4m3 or fp8_e5m2)");
  }
  return t;
}

amp::AmaxComputeAlgo parse_algo(const std::string& s) {
  if (s == "max") return amp::AmaxComputeAlgo::max;
  if (s == "most_recent") return amp::AmaxComputeAlgo::most_recent;
  throw std::invalid_argument("amax_compute_algo must be 'max' or 'most_recent', not '" + s + "'");
}

// The FP8 codes of x * scale (saturating, nearest-even) as exact float32 values, and amax(x):
// fp8_quantize_to_bf16 (the cast fp8_linear uses), widened from bf16 exactly.
std::pair<py::array_t<float>, float> fp8_cast(const FloatArray& x, const std::string& fmt,
                                              float scale) {
  const DType t = fp8_dtype(fmt);
  if (!(scale > 0.0f) || !std::isfinite(scale)) {
    throw std::invalid_argument("scale must be finite and > 0");
  }
  py::array_t<float> out(x.request().shape);
  const auto n = static_cast<size_t>(x.size());
  float amax = 0.0f;
  {
    py::gil_scoped_release nogil;
    std::vector<uint16_t> bf16(n);
    amax = amp::fp8_quantize_to_bf16(std::span<const float>(x.data(), n), t, scale, bf16);
    convert_to_f32(DType::bf16, bf16.data(), std::span<float>(out.mutable_data(), n));
  }
  return {out, amax};
}

Tensor tensor_from(const FloatArray& a) {
  const std::vector<int64_t> dims = shape_of(a);
  Tensor t = Tensor::empty(Shape(std::span<const int64_t>(dims)));
  if (a.size() > 0) std::memcpy(t.data<float>(), a.data(), static_cast<size_t>(a.size()) * 4);
  return t;
}

amp::Fp8Recipe recipe_named(const std::string& precision) {
  if (precision == "fp8") return amp::Fp8Recipe::delayed();
  if (precision == "fp8-current") return amp::Fp8Recipe::current();
  if (precision == "mxfp8") return amp::Fp8Recipe::mxfp8();
  throw std::invalid_argument("precision must be 'fp8', 'fp8-current' or 'mxfp8', not '" +
                              precision + "'");
}

// mixp's own FP8 Linear forward, y = x w^T + b, with a fresh layer state (delayed scaling: scales
// 1, as a new te.Linear), inside an Fp8Autocast region with gradients off.
py::array_t<float> fp8_linear_forward(const FloatArray& x, const FloatArray& w,
                                      const std::optional<FloatArray>& b,
                                      const std::string& precision) {
  if (w.ndim() != 2 || x.ndim() < 1 || x.shape(x.ndim() - 1) != w.shape(1)) {
    throw std::invalid_argument("fp8_linear: x [..., in] and w [out, in] do not match");
  }
  if (b && (b->ndim() != 1 || b->shape(0) != w.shape(0))) {
    throw std::invalid_argument("fp8_linear: b must have shape [out]");
  }
  amp::Fp8LinearMeta meta(recipe_named(precision));
  const Tensor tx = tensor_from(x), tw = tensor_from(w);
  const Tensor tb = b ? tensor_from(*b) : Tensor();
  Tensor y;
  {
    py::gil_scoped_release nogil;
    NoGradGuard no_grad;
    amp::Fp8Autocast region(true);
    y = amp::fp8_linear(tx, tw, tb, Activation::none, meta);
  }
  const std::vector<float> v = y.to_vector<float>();
  std::vector<py::ssize_t> shape(y.shape().begin(), y.shape().end());
  py::array_t<float> out(shape);
  if (!v.empty()) std::memcpy(out.mutable_data(), v.data(), v.size() * 4);
  return out;
}

py::dict step_dict(const train::StepInfo& s);

// Calls a Python function after every optimizer step with the step's numbers (StepInfo). The
// training loop runs without the GIL; the callback takes it for the call. An exception raised by
// the callback stops the run and reaches the caller of mixp.train.
class PyProgress : public train::TrainCallback {
 public:
  explicit PyProgress(py::object fn) : fn_(std::move(fn)) {}
  ~PyProgress() override {
    py::gil_scoped_acquire gil;
    fn_ = py::object();
  }
  void on_step_end(const train::StepInfo& s) override {
    py::gil_scoped_acquire gil;
    py::dict d = step_dict(s);
    fn_(d);  // a Python exception propagates as py::error_already_set
  }

 private:
  py::object fn_;
};

// One training run from a TrainConfig as JSON (train_config.h config_to_json's keys); returns
// result_to_json's text. Like `mixp train`, a run that did not train fails (RuntimeError).
std::string train_run(const std::string& config_json, const py::object& progress) {
  const train::TrainConfig c = train::config_from_json(config_json);
  std::shared_ptr<PyProgress> cb;
  if (!progress.is_none()) cb = std::make_shared<PyProgress>(progress);
  train::TrainResult r;
  {
    py::gil_scoped_release nogil;
    train::Trainer trainer(c);
    if (cb) trainer.add_callback(cb);
    r = trainer.fit();
  }
  if (!r.trained) throw std::runtime_error(r.not_trained);
  return train::result_to_json(r, -1);
}

py::dict step_dict(const train::StepInfo& s) {
  py::dict d;
  d["step"] = s.step;
  d["total_steps"] = s.total_steps;
  d["epoch"] = s.epoch;
  d["loss"] = s.loss;
  d["loss_scale"] = s.loss_scale;
  d["skipped"] = s.skipped;
  d["grad_norm"] = s.grad_norm;
  d["lr"] = s.lr;
  d["ms"] = s.ms;
  d["elapsed_s"] = s.elapsed_s;
  return d;
}

// The precision study, as `mixp compare` runs it (tools/mixp/cmd_compare.cpp): the same checks
// before the first run, study::run_study, and render_results_json's text (what --json prints).
// `progress` gets run_begin / step / evaluate / run_end events as dicts.
std::string compare_run(const std::string& base_json, const std::vector<std::string>& precisions,
                        int seeds, const std::string& out_dir, bool force, int timing_rounds,
                        const py::object& progress) {
  study::StudyConfig sc;
  sc.base = train::config_from_json(base_json);
  sc.precisions = precisions.empty() ? study::default_study_precisions(sc.base.model.name)
                                     : precisions;
  if (seeds < 1) throw std::invalid_argument("seeds must be positive, got " + std::to_string(seeds));
  if (timing_rounds < 0) throw std::invalid_argument("timing_rounds must be >= 0");
  sc.seeds = seeds;
  sc.out_dir = out_dir;
  sc.force = force;
  sc.timing_rounds = timing_rounds;
  study::check_precisions(sc.precisions, sc.base.model.name);
  if (!out_dir.empty()) study::check_output_dir(sc.out_dir, sc.force);
  train::TrainConfig probe = sc.base;
  probe.precision = sc.precisions.front();
  (void)probe.resolved();
  study::StudyProgress cb;
  if (!progress.is_none()) {
    cb = [&progress](const study::StudyEvent& e) {
      static constexpr const char* kinds[] = {"run_begin", "step", "evaluate", "run_end"};
      py::gil_scoped_acquire gil;
      py::dict d;
      d["kind"] = kinds[static_cast<int>(e.kind)];
      d["run_index"] = e.run_index;
      d["run_count"] = e.run_count;
      d["precision"] = e.precision;
      d["seed"] = e.seed;
      if (e.step) d["step"] = step_dict(*e.step);
      progress(d);
    };
  }
  study::StudyOutcome o;
  {
    py::gil_scoped_release nogil;
    o = study::run_study(sc, cb);
  }
  if (!o.any_finished) {
    throw std::runtime_error("no run finished (every run diverged or failed)");
  }
  return study::render_results_json(o.results);
}

// `mixp plan`: the same request the CLI builds (study::PlanRequest, tools/mixp/cmd_plan.cpp) and
// the same JSON text. `given`: the shape fields the caller passed (they override the preset's).
std::string plan_run(const std::string& config_json, const std::string& shape,
                     const std::string& family, int64_t vocab,
                     const std::vector<std::string>& given, int zero_stage, int ranks,
                     bool gemm_record) {
  study::PlanRequest r;
  r.config = train::config_from_json(config_json);
  r.shape = shape;
  r.family = family;
  r.vocab = vocab;
  r.options.zero_stage = zero_stage;
  r.options.ranks = ranks;
  r.options.gemm_from_record = gemm_record;
  for (const std::string& g : given) {
    auto& f = r.given;
    bool* flag = g == "layers"      ? &f.layers
                 : g == "width"     ? &f.width
                 : g == "heads"     ? &f.heads
                 : g == "mlp_width" ? &f.mlp_width
                 : g == "vocab"     ? &f.vocab
                 : g == "context"   ? &f.context
                 : g == "batch"     ? &f.batch
                                    : nullptr;
    if (flag == nullptr) throw std::invalid_argument("plan: unknown shape field '" + g + "'");
    *flag = true;
  }
  study::MemoryPlan p;
  {
    py::gil_scoped_release nogil;  // the probes train two small models
    p = study::plan_request(r);
  }
  return study::plan_to_json(p);
}

}  // namespace

void bind_engine(py::module_& m) {
  m.def("plan", &plan_run, py::arg("config_json"), py::arg("shape"), py::arg("family"),
        py::arg("vocab"), py::arg("given"), py::arg("zero_stage"), py::arg("ranks"),
        py::arg("gemm_record"));
  m.def("compare", &compare_run, py::arg("base_json"), py::arg("precisions"), py::arg("seeds"),
        py::arg("out_dir"), py::arg("force"), py::arg("timing_rounds"), py::arg("progress"));
  m.def("train", &train_run, py::arg("config_json"), py::arg("progress"));
  m.def("default_train_config", [] {
    static const train::TrainConfig defaults;  // a named object: GCC 12 misreads the temporary
    return train::config_to_json(defaults);
  });
  m.def("fp8_cast", &fp8_cast, py::arg("x"), py::arg("fmt"), py::arg("scale"));
  m.def("fp8_amax", [](const FloatArray& x) {
    py::gil_scoped_release nogil;
    return amp::fp8_amax(std::span<const float>(x.data(), static_cast<size_t>(x.size())));
  });
  m.def("fp8_max", [](const std::string& fmt) { return amp::fp8_max(fp8_dtype(fmt)); });
  m.def("fp8_scale_from_amax",
        [](float amax, const std::string& fmt, int margin, float previous) {
          if (margin < 0) throw std::invalid_argument("margin must be >= 0");
          return amp::fp8_scale_from_amax(amax, amp::fp8_max(fp8_dtype(fmt)), margin, previous);
        },
        py::arg("amax"), py::arg("fmt"), py::arg("margin"), py::arg("previous"));
  m.def("fp8_linear", &fp8_linear_forward, py::arg("x"), py::arg("w"), py::arg("b"),
        py::arg("precision"));
  py::class_<amp::Fp8ScalingState>(m, "Fp8ScalingState")
      .def(py::init([](const std::string& fmt, int64_t history_len, const std::string& algo,
                       int margin) {
             if (history_len < 1) throw std::invalid_argument("amax_history_len must be >= 1");
             if (margin < 0) throw std::invalid_argument("margin must be >= 0");
             return amp::Fp8ScalingState(fp8_dtype(fmt), history_len, parse_algo(algo), margin);
           }),
           py::arg("fmt"), py::arg("amax_history_len"), py::arg("amax_compute_algo"),
           py::arg("margin"))
      .def_property_readonly("scale", &amp::Fp8ScalingState::scale)
      .def_property_readonly("scale_inv", &amp::Fp8ScalingState::scale_inv)
      .def_property_readonly("amax_history",
                             [](const amp::Fp8ScalingState& s) { return s.history(); })
      .def("record_amax", &amp::Fp8ScalingState::record_amax)
      .def("update", &amp::Fp8ScalingState::update)
      .def("reset", &amp::Fp8ScalingState::reset);
}

}  // namespace mixp::python
