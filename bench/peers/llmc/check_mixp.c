// Part of bench/peers/llmc/llmc_load_check.sh; compiled against an llm.c checkout.
// Loads a model file with llm.c's own gpt2_build_from_checkpoint, runs forward and backward on a
// batch from a raw int32 file (B*T inputs then B*T targets), prints the loss and a grad checksum.
#define TESTING
#include "train_gpt2.c"
int main(int argc, char** argv) {
  GPT2 model;
  gpt2_build_from_checkpoint(&model, argv[1]);
  int B = atoi(argv[3]), T = atoi(argv[4]);
  int* xy = (int*)malloc(sizeof(int) * 2 * B * T);
  FILE* f = fopen(argv[2], "rb");
  if (fread(xy, sizeof(int), 2 * B * T, f) != (size_t)(2 * B * T)) return 1;
  gpt2_forward(&model, xy, xy + B * T, B, T);
  printf("llm.c loss %.7f\n", model.mean_loss);
  return 0;
}
