/*
 * kiwi_exec: replaces this process's program image with execve(2), keeping its pid.
 *
 * exec(file, args, env, keepFds) -> does not return on success; throws an Error with errno's text
 *   if execve fails (the process then goes on as it was). Node opens its files close-on-exec, its
 *   stdio included: the descriptors in keepFds (stdin, stdout, stderr, an IPC channel) are made
 *   inheritable first.
 *   Kiwi restarts itself once this way with glibc's huge-page tunable set (electron/engine/device/
 *   huge-pages.ts): the tunable is read only at a program's start, and the pid must stay the same
 *   for whatever started the process (a shell, a test, a supervisor) to keep watching and signalling it.
 */
#if !defined(_POSIX_C_SOURCE)
#define _POSIX_C_SOURCE 200809L
#endif
#include <errno.h>
#include <fcntl.h>
#include <node_api.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Frees a NULL-terminated array of strings. */
static void free_strings(char **xs) {
  if (xs == NULL) return;
  for (char **p = xs; *p != NULL; p++) free(*p);
  free(xs);
}

/* Copies a JS string into a new C string, or NULL. */
static char *copy_string(napi_env env, napi_value v) {
  size_t len = 0;
  if (napi_get_value_string_utf8(env, v, NULL, 0, &len) != napi_ok) return NULL;
  char *s = malloc(len + 1);
  if (s == NULL) return NULL;
  if (napi_get_value_string_utf8(env, v, s, len + 1, &len) != napi_ok) {
    free(s);
    return NULL;
  }
  return s;
}

/* Copies a JS array of strings into a NULL-terminated C array, or NULL. */
static char **copy_strings(napi_env env, napi_value array) {
  bool is_array = false;
  uint32_t n = 0;
  if (napi_is_array(env, array, &is_array) != napi_ok || !is_array) return NULL;
  if (napi_get_array_length(env, array, &n) != napi_ok) return NULL;
  char **xs = calloc((size_t)n + 1, sizeof(char *));
  if (xs == NULL) return NULL;
  for (uint32_t i = 0; i < n; i++) {
    napi_value item;
    if (napi_get_element(env, array, i, &item) != napi_ok || (xs[i] = copy_string(env, item)) == NULL) {
      free_strings(xs);
      return NULL;
    }
  }
  return xs;
}

static napi_value exec_program(napi_env env, napi_callback_info info) {
  size_t argc = 4;
  napi_value argv[4];
  bool is_array = false;
  uint32_t keep = 0;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc != 4 || napi_is_array(env, argv[3], &is_array) != napi_ok || !is_array ||
      napi_get_array_length(env, argv[3], &keep) != napi_ok) {
    napi_throw_type_error(env, NULL, "exec(file, args, env, keepFds) takes four arguments");
    return NULL;
  }
  for (uint32_t i = 0; i < keep; i++) {
    napi_value item;
    int32_t fd = -1;
    if (napi_get_element(env, argv[3], i, &item) != napi_ok || napi_get_value_int32(env, item, &fd) != napi_ok || fd < 0) {
      napi_throw_type_error(env, NULL, "exec: keepFds must be file descriptors");
      return NULL;
    }
    int flags = fcntl(fd, F_GETFD);
    if (flags >= 0) fcntl(fd, F_SETFD, flags & ~FD_CLOEXEC);
  }
  char *file = copy_string(env, argv[0]);
  char **args = copy_strings(env, argv[1]);
  char **envp = copy_strings(env, argv[2]);
  if (file == NULL || args == NULL || envp == NULL) {
    free(file);
    free_strings(args);
    free_strings(envp);
    napi_throw_type_error(env, NULL, "exec(file, args, env, keepFds): file must be a string, args and env arrays of strings");
    return NULL;
  }
  execve(file, args, envp);
  /* Only reached when execve failed. */
  const char *reason = strerror(errno);
  free(file);
  free_strings(args);
  free_strings(envp);
  napi_throw_error(env, NULL, reason);
  return NULL;
}

static napi_value init(napi_env env, napi_value exports) {
  napi_value fn;
  if (napi_create_function(env, "exec", NAPI_AUTO_LENGTH, exec_program, NULL, &fn) != napi_ok) return NULL;
  if (napi_set_named_property(env, exports, "exec", fn) != napi_ok) return NULL;
  return exports;
}

NAPI_MODULE(NODE_GYP_MODULE_NAME, init)
