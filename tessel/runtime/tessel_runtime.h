/* tessel_runtime.h: run a model exported by `tessel export` from C or C++.
 *
 * Header only: include it and link with -ldl (glibc 2.34 and later have dlopen in libc).
 * The exported library needs at run time the C library, libm, libmvec and libgomp (OpenMP).
 *
 *     char error[512];
 *     tessel_model* model = NULL;
 *     if (tessel_open("resnet18.so", &model, error, sizeof error) != TESSEL_OK) {
 *         fprintf(stderr, "%s\n", error);
 *         return 1;
 *     }
 *     const void* inputs[1] = {image};          // caller-owned, as tessel_input_info says
 *     void* outputs[1] = {logits};              // (or NULL: read tessel_output_data)
 *     if (tessel_run(model, inputs, outputs) != TESSEL_OK) {
 *         fprintf(stderr, "%s\n", tessel_error(model));
 *     }
 *     tessel_close(model);
 *
 * Every function returns a tessel_status; a failure leaves its message in tessel_error(model)
 * (in `error` for tessel_open). Nothing here aborts: a file that is truncated, not an export,
 * from another runtime ABI, for another architecture or for ISA features this CPU lacks is
 * refused before any of its kernels can run. One tessel_model runs one call at a time; open
 * the file again for another instance (the library is mapped once, and stays mapped until the
 * process ends: its OpenMP threads outlive tessel_close).
 *
 * The ABI (version 1): the file ends in a trailer, meta JSON | u32 meta bytes | u32 ABI |
 * u64 file bytes | "TESSELM\0", and the library exports the tessel_model_* functions below.
 */
#ifndef TESSEL_RUNTIME_H
#define TESSEL_RUNTIME_H

#include <dlfcn.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TESSEL_RUNTIME_ABI 1

typedef enum {
    TESSEL_OK = 0,
    TESSEL_ERROR_FILE = 1,      /* cannot read or map the file */
    TESSEL_ERROR_FORMAT = 2,    /* not an export, truncated, another ABI or architecture */
    TESSEL_ERROR_CPU = 3,       /* this CPU lacks ISA features the kernels use */
    TESSEL_ERROR_MEMORY = 4,    /* an allocation failed */
    TESSEL_ERROR_ARGUMENT = 5,  /* a bad index, thread count, NULL pointer */
    TESSEL_ERROR_KERNEL = 6     /* a kernel failed while running */
} tessel_status;

typedef struct {
    const char* name;
    const char* dtype;      /* "float32", "int64", "int32", "bool" (one byte), ... */
    int32_t rank;
    const int64_t* shape;   /* rank dimensions, row-major (C-contiguous) */
    int64_t nbytes;
} tessel_tensor_info;

typedef struct tessel_model {
    void* library;
    void* instance;
    char error[512];
    int32_t (*count)(int32_t);
    int32_t (*tensor)(int32_t, int32_t, const char**, const char**, int32_t*, const int64_t**,
                      int64_t*);
    void* (*create)(void);
    void (*destroy)(void*);
    void* (*buffer)(void*, int32_t, int32_t);
    int32_t (*run)(void*, const void* const*, void* const*, char*, int64_t);
    int32_t (*set_threads)(int32_t);
    int32_t (*get_threads)(void);
    const char* (*meta)(void);
} tessel_model;

#if defined(__x86_64__)
#define TESSEL_HOST_ARCH "x86_64"
#elif defined(__aarch64__)
#define TESSEL_HOST_ARCH "aarch64"
#else
#define TESSEL_HOST_ARCH "unknown"
#endif

static inline void tessel__say(char* error, size_t size, const char* path, const char* what) {
    if (error != NULL && size > 0) {
        snprintf(error, size, "%s: %s", path, what);
    }
}

/* The trailer's checks, before the file is mapped: TESSEL_OK or a format/file error. */
static inline tessel_status tessel__check_file(const char* path, char* error, size_t size) {
    static const char magic[8] = {'T', 'E', 'S', 'S', 'E', 'L', 'M', '\0'};
    unsigned char tail[24];
    char what[256];
    FILE* file = fopen(path, "rb");
    if (file == NULL) {
        tessel__say(error, size, path, "cannot open the file");
        return TESSEL_ERROR_FILE;
    }
    long length = fseek(file, 0, SEEK_END) == 0 ? ftell(file) : -1;
    if (length < 24 || fseek(file, length - 24, SEEK_SET) != 0 ||
            fread(tail, 1, 24, file) != 24) {
        fclose(file);
        tessel__say(error, size, path, "not a model exported by tessel (too short)");
        return TESSEL_ERROR_FORMAT;
    }
    uint32_t n_meta, abi;
    uint64_t expected;
    memcpy(&n_meta, tail, 4);
    memcpy(&abi, tail + 4, 4);
    memcpy(&expected, tail + 8, 8);
    if (memcmp(tail + 16, magic, 8) != 0) {
        fclose(file);
        tessel__say(error, size, path, "not a model exported by tessel (no tessel trailer: "
                    "a foreign file, or one cut short)");
        return TESSEL_ERROR_FORMAT;
    }
    if (expected != (uint64_t)length) {
        fclose(file);
        snprintf(what, sizeof what, "truncated or padded: %ld bytes where the export wrote "
                 "%llu", length, (unsigned long long)expected);
        tessel__say(error, size, path, what);
        return TESSEL_ERROR_FORMAT;
    }
    if (abi != TESSEL_RUNTIME_ABI) {
        fclose(file);
        snprintf(what, sizeof what, "exported with runtime ABI %u; this header reads ABI %d: "
                 "export the model again", abi, TESSEL_RUNTIME_ABI);
        tessel__say(error, size, path, what);
        return TESSEL_ERROR_FORMAT;
    }
    tessel_status status = TESSEL_OK;
    char* meta = (char*)malloc((size_t)n_meta + 1);
    if (meta == NULL || n_meta > (uint64_t)length - 24 ||
            fseek(file, length - 24 - (long)n_meta, SEEK_SET) != 0 ||
            fread(meta, 1, n_meta, file) != n_meta) {
        tessel__say(error, size, path, "damaged trailer");
        status = TESSEL_ERROR_FORMAT;
    } else {
        meta[n_meta] = '\0';
        if (strstr(meta, "\"arch\": \"" TESSEL_HOST_ARCH "\"") == NULL) {
            tessel__say(error, size, path, "built for another architecture than this "
                        "machine's (" TESSEL_HOST_ARCH ")");
            status = TESSEL_ERROR_FORMAT;
        }
    }
    free(meta);
    fclose(file);
    return status;
}

static inline void tessel_close(tessel_model* model) {
    if (model == NULL) {
        return;
    }
    if (model->instance != NULL) {
        model->destroy(model->instance);
    }
    if (model->library != NULL) {
        dlclose(model->library);
    }
    free(model);
}

/* Open the exported model in `path`: *model is set on TESSEL_OK, else `error` says why. */
static inline tessel_status tessel_open(const char* path, tessel_model** model, char* error,
                                        size_t error_size) {
    if (model == NULL || path == NULL) {
        tessel__say(error, error_size, path ? path : "(null)", "NULL argument");
        return TESSEL_ERROR_ARGUMENT;
    }
    *model = NULL;
    tessel_status status = tessel__check_file(path, error, error_size);
    if (status != TESSEL_OK) {
        return status;
    }
    tessel_model* m = (tessel_model*)calloc(1, sizeof *m);
    if (m == NULL) {
        tessel__say(error, error_size, path, "out of memory");
        return TESSEL_ERROR_MEMORY;
    }
    char local[4096];  /* dlopen searches the library path for a name without a slash */
    if (strchr(path, '/') == NULL && strlen(path) + 3 <= sizeof local) {
        snprintf(local, sizeof local, "./%s", path);
    } else {
        snprintf(local, sizeof local, "%s", path);
    }
    /* never unmapped: OpenMP's worker threads outlive a run and must not lose their code */
    m->library = dlopen(local, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
    if (m->library == NULL) {
        const char* reason = dlerror();
        tessel__say(error, error_size, path, reason ? reason : "dlopen failed");
        free(m);
        return TESSEL_ERROR_FILE;
    }
    int32_t (*abi)(void) = (int32_t (*)(void))dlsym(m->library, "tessel_model_abi_version");
    int32_t (*check_cpu)(char*, int64_t) =
        (int32_t (*)(char*, int64_t))dlsym(m->library, "tessel_model_check_cpu");
    *(void**)&m->count = dlsym(m->library, "tessel_model_count");
    *(void**)&m->tensor = dlsym(m->library, "tessel_model_tensor");
    *(void**)&m->create = dlsym(m->library, "tessel_model_create");
    *(void**)&m->destroy = dlsym(m->library, "tessel_model_destroy");
    *(void**)&m->buffer = dlsym(m->library, "tessel_model_buffer");
    *(void**)&m->run = dlsym(m->library, "tessel_model_run");
    *(void**)&m->set_threads = dlsym(m->library, "tessel_model_set_threads");
    *(void**)&m->get_threads = dlsym(m->library, "tessel_model_get_threads");
    *(void**)&m->meta = dlsym(m->library, "tessel_model_meta");
    if (!abi || !check_cpu || !m->count || !m->tensor || !m->create || !m->destroy ||
            !m->buffer || !m->run || !m->set_threads || !m->get_threads || !m->meta ||
            abi() != TESSEL_RUNTIME_ABI) {
        tessel__say(error, error_size, path, "not a model exported by this tessel (its entry "
                    "points differ)");
        tessel_close(m);
        return TESSEL_ERROR_FORMAT;
    }
    char why[400];
    if (check_cpu(why, (int64_t)sizeof why) != 0) {
        tessel__say(error, error_size, path, why);
        tessel_close(m);
        return TESSEL_ERROR_CPU;
    }
    m->instance = m->create();
    if (m->instance == NULL) {
        tessel__say(error, error_size, path, "cannot allocate the model's activations");
        tessel_close(m);
        return TESSEL_ERROR_MEMORY;
    }
    *model = m;
    return TESSEL_OK;
}

/* The message of the last failed call on `model`. */
static inline const char* tessel_error(const tessel_model* model) {
    return model != NULL ? model->error : "no model";
}

/* The model's description as JSON: name, target, inputs, outputs, provenance. */
static inline const char* tessel_model_info(const tessel_model* model) {
    return model->meta();
}

static inline int32_t tessel_input_count(const tessel_model* model) {
    return model->count(0);
}

static inline int32_t tessel_output_count(const tessel_model* model) {
    return model->count(1);
}

static inline tessel_status tessel__info(tessel_model* model, int32_t outputs, int32_t i,
                                         tessel_tensor_info* info) {
    if (info == NULL || model->tensor(outputs, i, &info->name, &info->dtype, &info->rank,
                                      &info->shape, &info->nbytes) != 0) {
        snprintf(model->error, sizeof model->error, "%s %d: no such tensor (the model has %d)",
                 outputs ? "output" : "input", i, model->count(outputs));
        return TESSEL_ERROR_ARGUMENT;
    }
    return TESSEL_OK;
}

static inline tessel_status tessel_input_info(tessel_model* model, int32_t i,
                                              tessel_tensor_info* info) {
    return tessel__info(model, 0, i, info);
}

static inline tessel_status tessel_output_info(tessel_model* model, int32_t i,
                                               tessel_tensor_info* info) {
    return tessel__info(model, 1, i, info);
}

/* Where input i lives inside the model: write it there and run with inputs NULL (no copy). */
static inline void* tessel_input_data(tessel_model* model, int32_t i) {
    return model->buffer(model->instance, 0, i);
}

/* Output i after a run, in the model's own buffer (valid until the next run or close). */
static inline const void* tessel_output_data(tessel_model* model, int32_t i) {
    return model->buffer(model->instance, 1, i);
}

/* Run the model: `inputs` holds one pointer per input (each nbytes of tessel_input_info,
   C-contiguous) or is NULL; `outputs` one pointer per output to copy results to, or NULL. */
static inline tessel_status tessel_run(tessel_model* model, const void* const* inputs,
                                       void* const* outputs) {
    int32_t status = model->run(model->instance, inputs, outputs, model->error,
                                (int64_t)sizeof model->error);
    return status == 0 ? TESSEL_OK : status == 2 ? TESSEL_ERROR_ARGUMENT : TESSEL_ERROR_KERNEL;
}

/* The OpenMP threads of every model loaded from the same file (default: the cores it was
   tuned for). */
static inline tessel_status tessel_set_threads(tessel_model* model, int32_t threads) {
    if (model->set_threads(threads) != 0) {
        snprintf(model->error, sizeof model->error, "threads must be positive, got %d",
                 threads);
        return TESSEL_ERROR_ARGUMENT;
    }
    return TESSEL_OK;
}

static inline int32_t tessel_get_threads(const tessel_model* model) {
    return model->get_threads();
}

#ifdef __cplusplus
}
#endif

#endif /* TESSEL_RUNTIME_H */
