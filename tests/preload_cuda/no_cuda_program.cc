// A program that never touches CUDA, run with LD_PRELOAD=libreplayalloc_preload.so
// built with the CUDA hooks: it allocates as usual, and the cudaMalloc/cudaFree the
// library exports answer "initialization error" (no runtime is loaded) instead of
// crashing, for a program that looks them up by name. Exits 0 when all held.
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

int main() {
  int failed = 0;
  std::vector<std::string> v;
  for (int i = 0; i < 1000; ++i) v.push_back(std::string(100 + i, 'a' + i % 26));
  for (int i = 0; i < 1000; ++i) failed += v[i].size() != 100u + i || v[i][0] != 'a' + i % 26;
  void* big = std::malloc(1 << 20);
  std::memset(big, 7, 1 << 20);
  std::free(big);

  using malloc_fn = int (*)(void**, std::size_t);
  using free_fn = int (*)(void*);
  auto cuda_malloc = reinterpret_cast<malloc_fn>(dlsym(RTLD_DEFAULT, "cudaMalloc"));
  auto cuda_free = reinterpret_cast<free_fn>(dlsym(RTLD_DEFAULT, "cudaFree"));
  if (cuda_malloc != nullptr && cuda_free != nullptr) {
    void* p = nullptr;
    constexpr int initialization_error = 3;  // cudaErrorInitializationError
    const int e = cuda_malloc(&p, 4096);
    if (e != initialization_error || p != nullptr) {
      std::fprintf(stderr, "no_cuda_program: cudaMalloc without a runtime gave %d\n", e);
      ++failed;
    }
    if (cuda_free(nullptr) != initialization_error) {
      std::fprintf(stderr, "no_cuda_program: cudaFree without a runtime succeeded\n");
      ++failed;
    }
    std::printf("no_cuda_program: the library's cudaMalloc answers 'initialization error'\n");
  } else {
    std::printf("no_cuda_program: the library exports no CUDA hooks (built without the toolkit)\n");
  }
  return failed == 0 ? 0 : 1;
}
