/*
 * kiwi_membw: measures host memory READ bandwidth with several threads at once, the quantity the
 * planner's cost model needs (at batch size one a stage reads each weight once per token).
 *
 * measureRead(bytesPerThread, threads, passes) -> Promise<{ seconds, bytes, checksum }>
 *   Each thread allocates and first-touches its own buffer (so it is local to that thread's memory
 *   node), all threads wait at a start line, then each reads its buffer `passes` times with
 *   independent 64-bit accumulators. seconds runs from the start signal to the last thread done.
 *   The work runs on a libuv worker thread, so the JS event loop stays free (progress display).
 */
/* posix_memalign and clock_gettime under -std=c11 */
#if !defined(_WIN32) && !defined(_POSIX_C_SOURCE)
#define _POSIX_C_SOURCE 200809L
#endif
#include <node_api.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#ifdef _WIN32
#include <windows.h>
typedef HANDLE thread_t;
static double now_seconds(void) {
  LARGE_INTEGER f, c;
  QueryPerformanceFrequency(&f);
  QueryPerformanceCounter(&c);
  return (double)c.QuadPart / (double)f.QuadPart;
}
static long atomic_inc(volatile long *p) { return InterlockedIncrement(p); }
static long atomic_load(volatile long *p) { return InterlockedCompareExchange(p, 0, 0); }
static void atomic_store(volatile long *p, long v) { InterlockedExchange(p, v); }
static void cpu_relax(void) { YieldProcessor(); }
#else
#include <pthread.h>
#include <time.h>
typedef pthread_t thread_t;
static double now_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
static long atomic_inc(volatile long *p) { return __atomic_add_fetch(p, 1, __ATOMIC_SEQ_CST); }
static long atomic_load(volatile long *p) { return __atomic_load_n(p, __ATOMIC_SEQ_CST); }
static void atomic_store(volatile long *p, long v) { __atomic_store_n(p, v, __ATOMIC_SEQ_CST); }
static void cpu_relax(void) {}
#endif

#define MAX_THREADS 1024
#define ALIGN 64

typedef struct {
  /* shared by all threads of one measurement */
  volatile long ready;
  volatile long go;
  volatile long failed;
  size_t bytes_per_thread;
  uint32_t passes;
} shared_t;

typedef struct {
  shared_t *shared;
  uint64_t checksum;
  double end;
} worker_t;

static uint64_t read_buffer(const uint64_t *p, size_t words) {
  /* Eight independent sums let the compiler vectorise and keep enough loads in flight. */
  uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0, s4 = 0, s5 = 0, s6 = 0, s7 = 0;
  size_t i = 0;
  for (; i + 8 <= words; i += 8) {
    s0 += p[i]; s1 += p[i + 1]; s2 += p[i + 2]; s3 += p[i + 3];
    s4 += p[i + 4]; s5 += p[i + 5]; s6 += p[i + 6]; s7 += p[i + 7];
  }
  for (; i < words; i++) s0 += p[i];
  return s0 + s1 + s2 + s3 + s4 + s5 + s6 + s7;
}

#ifdef _WIN32
static DWORD WINAPI worker_main(LPVOID arg)
#else
static void *worker_main(void *arg)
#endif
{
  worker_t *w = (worker_t *)arg;
  shared_t *sh = w->shared;
  size_t words = sh->bytes_per_thread / sizeof(uint64_t);
  uint64_t *buf = NULL;
#ifdef _WIN32
  buf = (uint64_t *)_aligned_malloc(words * sizeof(uint64_t), ALIGN);
#else
  if (posix_memalign((void **)&buf, ALIGN, words * sizeof(uint64_t)) != 0) buf = NULL;
#endif
  if (buf == NULL) {
    atomic_store(&sh->failed, 1);
  } else {
    /* First touch: makes the pages resident (and local) before the clock starts. */
    for (size_t i = 0; i < words; i++) buf[i] = (uint64_t)i * 2654435761u;
  }
  atomic_inc(&sh->ready);
  while (atomic_load(&sh->go) == 0) cpu_relax();
  uint64_t sum = 0;
  if (buf != NULL && atomic_load(&sh->failed) == 0) {
    for (uint32_t pass = 0; pass < sh->passes; pass++) sum += read_buffer(buf, words);
  }
  w->end = now_seconds();
  w->checksum = sum;
#ifdef _WIN32
  if (buf != NULL) _aligned_free(buf);
  return 0;
#else
  free(buf);
  return NULL;
#endif
}

typedef struct {
  napi_async_work work;
  napi_deferred deferred;
  size_t bytes_per_thread;
  uint32_t threads;
  uint32_t passes;
  double seconds;
  uint64_t checksum;
  const char *error;
} job_t;

static void execute(napi_env env, void *data) {
  (void)env;
  job_t *job = (job_t *)data;
  shared_t sh;
  memset(&sh, 0, sizeof sh);
  sh.bytes_per_thread = job->bytes_per_thread;
  sh.passes = job->passes;
  worker_t *workers = (worker_t *)calloc(job->threads, sizeof(worker_t));
  thread_t *handles = (thread_t *)calloc(job->threads, sizeof(thread_t));
  if (workers == NULL || handles == NULL) {
    free(workers);
    free(handles);
    job->error = "out of memory for thread bookkeeping";
    return;
  }
  uint32_t started = 0;
  for (; started < job->threads; started++) {
    workers[started].shared = &sh;
#ifdef _WIN32
    handles[started] = CreateThread(NULL, 0, worker_main, &workers[started], 0, NULL);
    if (handles[started] == NULL) break;
#else
    if (pthread_create(&handles[started], NULL, worker_main, &workers[started]) != 0) break;
#endif
  }
  if (started < job->threads) atomic_store(&sh.failed, 1);
  while (atomic_load(&sh.ready) < (long)started) cpu_relax();
  double start = now_seconds();
  atomic_store(&sh.go, 1);
  double end = start;
  uint64_t checksum = 0;
  for (uint32_t i = 0; i < started; i++) {
#ifdef _WIN32
    WaitForSingleObject(handles[i], INFINITE);
    CloseHandle(handles[i]);
#else
    pthread_join(handles[i], NULL);
#endif
    if (workers[i].end > end) end = workers[i].end;
    checksum += workers[i].checksum;
  }
  if (atomic_load(&sh.failed) != 0) job->error = "could not allocate the buffers or start the threads";
  job->seconds = end - start;
  job->checksum = checksum;
  free(workers);
  free(handles);
}

static void complete(napi_env env, napi_status status, void *data) {
  job_t *job = (job_t *)data;
  if (status != napi_ok || job->error != NULL) {
    napi_value msg, err;
    napi_create_string_utf8(env, job->error != NULL ? job->error : "measurement cancelled", NAPI_AUTO_LENGTH, &msg);
    napi_create_error(env, NULL, msg, &err);
    napi_reject_deferred(env, job->deferred, err);
  } else {
    napi_value result, seconds, bytes, checksum;
    napi_create_object(env, &result);
    napi_create_double(env, job->seconds, &seconds);
    napi_create_double(env, (double)job->bytes_per_thread * job->threads * job->passes, &bytes);
    /* Low 52 bits are enough to keep the compiler from dropping the reads. */
    napi_create_double(env, (double)(job->checksum & ((1ULL << 52) - 1)), &checksum);
    napi_set_named_property(env, result, "seconds", seconds);
    napi_set_named_property(env, result, "bytes", bytes);
    napi_set_named_property(env, result, "checksum", checksum);
    napi_resolve_deferred(env, job->deferred, result);
  }
  napi_delete_async_work(env, job->work);
  free(job);
}

static napi_value throw_range(napi_env env, const char *msg) {
  napi_throw_range_error(env, NULL, msg);
  return NULL;
}

static napi_value measure_read(napi_env env, napi_callback_info info) {
  size_t argc = 3;
  napi_value argv[3];
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 3) {
    return throw_range(env, "measureRead(bytesPerThread, threads, passes) takes three numbers");
  }
  double bytes, threads, passes;
  if (napi_get_value_double(env, argv[0], &bytes) != napi_ok || napi_get_value_double(env, argv[1], &threads) != napi_ok ||
      napi_get_value_double(env, argv[2], &passes) != napi_ok) {
    return throw_range(env, "measureRead(bytesPerThread, threads, passes) takes three numbers");
  }
  /* Limits checked before anything is allocated: 64 B .. 16 GiB per thread, 1..1024 threads. */
  if (!(bytes >= 64 && bytes <= 17179869184.0)) return throw_range(env, "bytesPerThread must be between 64 B and 16 GiB");
  if (!(threads >= 1 && threads <= MAX_THREADS)) return throw_range(env, "threads must be between 1 and 1024");
  if (!(passes >= 1 && passes <= 1000000)) return throw_range(env, "passes must be between 1 and 1000000");

  job_t *job = (job_t *)calloc(1, sizeof(job_t));
  if (job == NULL) return throw_range(env, "out of memory");
  job->bytes_per_thread = ((size_t)bytes / ALIGN) * ALIGN;
  job->threads = (uint32_t)threads;
  job->passes = (uint32_t)passes;

  napi_value promise, name;
  napi_create_promise(env, &job->deferred, &promise);
  napi_create_string_utf8(env, "kiwi.measureRead", NAPI_AUTO_LENGTH, &name);
  napi_create_async_work(env, NULL, name, execute, complete, job, &job->work);
  napi_queue_async_work(env, job->work);
  return promise;
}

static napi_value init(napi_env env, napi_value exports) {
  napi_value fn;
  napi_create_function(env, "measureRead", NAPI_AUTO_LENGTH, measure_read, NULL, &fn);
  napi_set_named_property(env, exports, "measureRead", fn);
  return exports;
}

NAPI_MODULE(NODE_GYP_MODULE_NAME, init)
