// Part of bench/peers/llmc/llmc_step_time.sh: times llm.c's CPU trainer step (train_gpt2.c's
// gpt2_forward, gpt2_zero_grad, gpt2_backward, gpt2_update, as its main loop calls them) on
// random tokens. Usage: time_llmc MODEL.bin B T STEPS
#define TESTING
#include "train_gpt2.c"
int main(int argc, char** argv) {
  GPT2 model;
  gpt2_build_from_checkpoint(&model, argv[1]);
  const int B = atoi(argv[2]), T = atoi(argv[3]), steps = atoi(argv[4]);
  int* tokens = (int*)malloc(sizeof(int) * (B * T + 1));
  unsigned long long s = 1;  // a 64-bit LCG (Knuth's MMIX constants)
  for (int i = 0; i < B * T + 1; i++) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    tokens[i] = (int)((s >> 33) % 50257);
  }
  double* ms = (double*)malloc(sizeof(double) * (steps + 1));
  for (int step = 0; step <= steps; step++) {  // step 0 allocates: untimed
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    gpt2_forward(&model, tokens, tokens + 1, B, T);
    gpt2_zero_grad(&model);
    gpt2_backward(&model);
    gpt2_update(&model, 1e-4f, 0.9f, 0.999f, 1e-8f, 0.0f, step + 1);
    clock_gettime(CLOCK_MONOTONIC, &b);
    ms[step] = (b.tv_sec - a.tv_sec) * 1e3 + (b.tv_nsec - a.tv_nsec) / 1e6;
  }
  // median of the timed steps (insertion sort; steps is small)
  for (int i = 2; i <= steps; i++)
    for (int j = i; j > 1 && ms[j] < ms[j - 1]; j--) {
      double t = ms[j]; ms[j] = ms[j - 1]; ms[j - 1] = t;
    }
  printf("{\"llmc_ms\": %.1f, \"loss\": %.4f}\n", ms[1 + (steps - 1) / 2], model.mean_loss);
  return 0;
}
