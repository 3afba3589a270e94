// Automatic mixed precision with fp16: an Autocast region around the forward pass and a GradScaler
// around backward and the optimizer step. The C++ twin of the PyTorch loop in the seeds (001
// section 11.2.3, 003 "PyTorch AMP"), with the two refinements of sections 11.3.2 and 11.3.4:
// gradient accumulation, and clipping after unscale_.
//
//   PyTorch                                   mixp
//   scaler = GradScaler()                     amp::GradScaler scaler;
//   with autocast(dtype=torch.float16):       { amp::Autocast ac(DType::fp16);
//       loss = loss_fn(model(x), y)               loss = cross_entropy(model(x), y); }
//   scaler.scale(loss).backward()             scaler.scale(loss).backward();
//   scaler.unscale_(optimizer)                scaler.unscale_(opt);
//   clip_grad_norm_(params, 1.0)              optim::clip_grad_norm(opt.parameters(), 1.0);
//   scaler.step(optimizer)                    scaler.step(opt);
//   scaler.update()                           scaler.update();
//
// Run: build/release/example_amp_gradscaler [steps]
// ctest-args: 5
// (Fashion-MNIST from the dataset-fashion-mnist package when installed, else synthetic images)
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "mixp/amp/autocast.h"
#include "mixp/amp/grad_scaler.h"
#include "mixp/data/image_dataset.h"
#include "mixp/nn/models.h"
#include "mixp/ops/ops.h"
#include "mixp/optim/adam.h"
#include "mixp/optim/clip_grad.h"
#include "mixp/tensor/factories.h"

using namespace mixp;

int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::atoi(argv[1]) : 100;
  const int64_t batch = 32, accum = 4;  // effective batch 128, as in section 11.3.2
  data::ImageDataset ds;
  try {
    ds = data::load_fashion_mnist(data::kFashionMnistDir, data::Split::train,
                                  {.limit = 8192, .normalize = true});
  } catch (const std::exception&) {
    ds = data::synthetic_images(4096, 28, 28, 10, /*seed=*/1, /*noise=*/0.9f);
  }

  // 1. The model stays fp32: Autocast casts the weights to fp16 per region (cached once).
  auto model = nn::make_model({.name = "mlp"});
  optim::AdamW opt(model->named_parameters(), {.lr = 1e-3});
  // 2. The GradScaler: PyTorch's defaults (2^16, x2 every 2000 clean steps, x0.5 on inf/NaN).
  amp::GradScaler scaler;

  int64_t next = 0, skipped = 0;
  for (int step = 0; step < steps; ++step) {
    opt.zero_grad();
    double step_loss = 0;
    for (int64_t m = 0; m < accum; ++m) {
      std::vector<float> x(static_cast<size_t>(batch * 784));
      std::vector<int64_t> y(static_cast<size_t>(batch));
      for (int64_t i = 0; i < batch; ++i, next = (next + 1) % ds.count) {
        std::copy(ds.image(next).begin(), ds.image(next).end(), x.begin() + i * 784);
        y[size_t(i)] = ds.labels[size_t(next)];
      }
      Tensor loss;
      {
        // 3. Mixed-precision forward: linear in fp16, cross_entropy in fp32.
        amp::Autocast ac(DType::fp16);
        loss = cross_entropy((*model)(from_vector(x, {batch, 784})), from_vector(y, {batch}));
      }
      step_loss += loss.item() / double(accum);
      // 4. Backward of the scaled loss (divided by the accumulation count, so the step averages).
      scaler.scale(mul(loss, 1.0 / double(accum))).backward();
    }
    // 5. Unscale once per step, clip the real gradients, step unless they had an inf/NaN.
    scaler.unscale_(opt);
    optim::clip_grad_norm(opt.parameters(), 1.0);
    if (!scaler.step(opt)) ++skipped;  // a learning-rate schedule would not advance here
    scaler.update();
    if (step % 20 == 0 || step == steps - 1)
      std::printf("step %3d  loss %.4f  loss scale %g\n", step, step_loss, scaler.get_scale());
  }
  std::printf("final scale: %g, skipped steps: %lld\n", scaler.get_scale(),
              static_cast<long long>(skipped));
  return 0;
}
