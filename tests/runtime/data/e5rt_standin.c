/* A stand-in for Espresso.framework's e5rt_* C API, for testing anekit.runtime.e5rt on
 * machines without it. It implements the symbols anekit calls with the calling conventions
 * of e5rt-reference (create calls take their out-pointer first; compile and retain calls last;
 * release calls the handle's address), checks every handle's kind, and appends one line
 * per call to the file named by E5RT_STANDIN_LOG.
 *
 * Its "program" is fixed: executing a stream writes, into every output buffer, the fp16
 * values of the alphabetically first input port's buffer plus one. A counter program
 * (c_next = c + 1) therefore computes what the real engine would, so resident state
 * (an input port bound to an output port's buffer) can be checked step by step.
 *
 * Build: gcc -shared -fPIC -O1 -o libe5rt_standin.so e5rt_standin.c
 */
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum kind { CONFIG = 1, COMPILER, OPTIONS, LIBRARY, FUNCTION, OPOPTS, OPERATION, PORT, BUFFER, STREAM };

#define MAX_PORTS 64
struct obj {
    int kind;
    int id;
    char name[256];
    /* buffer */
    size_t size;
    unsigned char *data;
    /* port */
    int is_input;
    struct obj *buffer;
    struct obj *op;
    /* operation */
    struct obj *ports[MAX_PORTS];
    int nports;
    /* stream */
    struct obj *encoded;
};

static int next_id = 1;

static void record(const char *fmt, ...) {
    const char *path = getenv("E5RT_STANDIN_LOG");
    if (!path) return;
    FILE *f = fopen(path, "a");
    if (!f) return;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(f, fmt, ap);
    va_end(ap);
    fputc('\n', f);
    fclose(f);
}

static struct obj *make(int kind) {
    struct obj *o = calloc(1, sizeof *o);
    o->kind = kind;
    o->id = next_id++;
    return o;
}

/* a handle of the expected kind, or NULL (the call then fails with status 1) */
static struct obj *as(void *h, int kind) {
    struct obj *o = h;
    return (o && o->kind == kind) ? o : NULL;
}

#define CHECK(cond, what)                                   \
    do {                                                    \
        if (!(cond)) {                                      \
            record("ERROR %s: %s", __func__, what);         \
            return 1;                                       \
        }                                                   \
    } while (0)

int e5rt_e5_compiler_config_options_create(void **out) {
    CHECK(out, "out is NULL");
    *out = make(CONFIG);
    record("e5rt_e5_compiler_config_options_create -> %d", ((struct obj *)*out)->id);
    return 0;
}

int e5rt_e5_compiler_config_options_set_cache_bundle_location(void *config, const char *path) {
    CHECK(as(config, CONFIG), "not a config");
    CHECK(path && *path, "empty path");
    record("e5rt_e5_compiler_config_options_set_cache_bundle_location");
    return 0;
}

int e5rt_e5_compiler_create_with_config(void **out, void *config) {
    CHECK(out && as(config, CONFIG), "bad arguments (out-pointer first)");
    *out = make(COMPILER);
    record("e5rt_e5_compiler_create_with_config -> %d", ((struct obj *)*out)->id);
    return 0;
}

int e5rt_e5_compiler_options_create(void **out) {
    CHECK(out, "out is NULL");
    *out = make(OPTIONS);
    record("e5rt_e5_compiler_options_create -> %d", ((struct obj *)*out)->id);
    return 0;
}

int e5rt_e5_compiler_options_set_compute_device_types_mask(void *options, uint64_t mask) {
    CHECK(as(options, OPTIONS), "not options");
    CHECK(mask >= 1 && mask <= 7, "mask outside 0x1-0x7");
    record("e5rt_e5_compiler_options_set_compute_device_types_mask 0x%llx", (unsigned long long)mask);
    return 0;
}

int e5rt_e5_compiler_options_set_force_recompilation(void *options, bool force) {
    CHECK(as(options, OPTIONS), "not options");
    record("e5rt_e5_compiler_options_set_force_recompilation %d", (int)force);
    return 0;
}

int e5rt_e5_compiler_options_set_segmenter(void *options, const char *segmenter) {
    CHECK(as(options, OPTIONS) && segmenter, "bad arguments");
    record("e5rt_e5_compiler_options_set_segmenter %s", segmenter);
    return 0;
}

int e5rt_e5_compiler_compile(void *compiler, const char *mil_path, void *options, void **out) {
    CHECK(as(compiler, COMPILER) && as(options, OPTIONS) && out, "bad arguments");
    FILE *f = fopen(mil_path, "r");
    CHECK(f, "Invalid E5 path specified");
    char head[9] = {0};
    size_t n = fread(head, 1, 8, f);
    fclose(f);
    CHECK(n == 8 && strncmp(head, "program(", 8) == 0, "not MIL text");
    *out = make(LIBRARY);
    record("e5rt_e5_compiler_compile %s -> %d", mil_path, ((struct obj *)*out)->id);
    return 0;
}

int e5rt_program_library_retain_program_function(void *library, const char *name, void **out) {
    CHECK(as(library, LIBRARY) && name && out, "bad arguments");
    CHECK(strcmp(name, "main") == 0, "no such function");
    *out = make(FUNCTION);
    record("e5rt_program_library_retain_program_function %s -> %d", name, ((struct obj *)*out)->id);
    return 0;
}

int e5rt_precompiled_compute_op_create_options_create_with_program_function(void **out, void *function) {
    CHECK(out && as(function, FUNCTION), "Cannot provide program function as nullptr");
    *out = make(OPOPTS);
    record("e5rt_precompiled_compute_op_create_options_create_with_program_function -> %d",
           ((struct obj *)*out)->id);
    return 0;
}

int e5rt_precompiled_compute_op_create_options_set_operation_name(void *op_options, const char *name) {
    CHECK(as(op_options, OPOPTS) && name, "bad arguments");
    record("e5rt_precompiled_compute_op_create_options_set_operation_name %s", name);
    return 0;
}

int e5rt_precompiled_compute_op_create_options_set_allocate_intermediate_buffers(void *op_options, bool yes) {
    CHECK(as(op_options, OPOPTS), "not op options");
    record("e5rt_precompiled_compute_op_create_options_set_allocate_intermediate_buffers %d", (int)yes);
    return 0;
}

int e5rt_execution_stream_operation_create_precompiled_compute_operation_with_options(void **out, void *op_options) {
    CHECK(out && as(op_options, OPOPTS), "bad arguments (out-pointer first)");
    *out = make(OPERATION);
    record("e5rt_execution_stream_operation_create_precompiled_compute_operation_with_options -> %d",
           ((struct obj *)*out)->id);
    return 0;
}

static int retain_port(void *operation, const char *name, void **out, int is_input) {
    struct obj *op = as(operation, OPERATION);
    CHECK(op && name && out, "bad arguments");
    CHECK(op->nports < MAX_PORTS, "too many ports");
    struct obj *p = make(PORT);
    snprintf(p->name, sizeof p->name, "%s", name);
    p->is_input = is_input;
    p->op = op;
    op->ports[op->nports++] = p;
    *out = p;
    record("e5rt_execution_stream_operation_retain_%s_port %s -> %d", is_input ? "input" : "output", name, p->id);
    return 0;
}

int e5rt_execution_stream_operation_retain_input_port(void *operation, const char *name, void **out) {
    return retain_port(operation, name, out, 1);
}

int e5rt_execution_stream_operation_retain_output_port(void *operation, const char *name, void **out) {
    return retain_port(operation, name, out, 0);
}

int e5rt_buffer_object_alloc(void **out, size_t size, int type) {
    CHECK(out, "out is NULL");
    CHECK(type >= 0 && type <= 2, "Invalid BufferType @ AllocMemory");
    struct obj *b = make(BUFFER);
    b->size = size;
    b->data = calloc(size ? size : 1, 1);
    *out = b;
    record("e5rt_buffer_object_alloc %zu type %d -> %d", size, type, b->id);
    return 0;
}

int e5rt_buffer_object_get_data_ptr(void *buffer, void **out) {
    struct obj *b = as(buffer, BUFFER);
    CHECK(b && out, "bad arguments");
    *out = b->data;
    record("e5rt_buffer_object_get_data_ptr %d", b->id);
    return 0;
}

int e5rt_io_port_bind_buffer_object(void *port, void *buffer) {
    struct obj *p = as(port, PORT), *b = as(buffer, BUFFER);
    CHECK(p && b, "bad arguments");
    p->buffer = b;
    record("e5rt_io_port_bind_buffer_object %s %d", p->name, b->id);
    return 0;
}

int e5rt_execution_stream_create(void **out) {
    CHECK(out, "out is NULL");
    *out = make(STREAM);
    record("e5rt_execution_stream_create -> %d", ((struct obj *)*out)->id);
    return 0;
}

int e5rt_execution_stream_encode_operation(void *stream, void *operation) {
    struct obj *s = as(stream, STREAM), *op = as(operation, OPERATION);
    CHECK(s && op, "bad arguments");
    CHECK(!s->encoded, "already encoded: reset the stream first");
    s->encoded = op;
    record("e5rt_execution_stream_encode_operation %d", op->id);
    return 0;
}

int e5rt_execution_stream_execute_sync(void *stream) {
    struct obj *s = as(stream, STREAM);
    CHECK(s && s->encoded, "nothing encoded");
    struct obj *op = s->encoded, *first = NULL;
    for (int i = 0; i < op->nports; i++) {
        struct obj *p = op->ports[i];
        CHECK(p->buffer, "a port has no buffer bound");
        if (p->is_input && (!first || strcmp(p->name, first->name) < 0)) first = p;
    }
    CHECK(first, "no input port");
    size_t n = first->buffer->size / 2;
    _Float16 *in = malloc(n * sizeof *in);
    memcpy(in, first->buffer->data, n * 2);  /* read every input before writing outputs */
    for (int i = 0; i < op->nports; i++) {
        struct obj *p = op->ports[i];
        if (p->is_input) continue;
        size_t m = p->buffer->size / 2 < n ? p->buffer->size / 2 : n;
        _Float16 *out = (_Float16 *)p->buffer->data;
        for (size_t k = 0; k < m; k++) out[k] = in[k] + (_Float16)1.0f;
    }
    free(in);
    record("e5rt_execution_stream_execute_sync");
    return 0;
}

static int release(void **handle, int kind, const char *symbol) {
    CHECK(handle, "handle address is NULL");
    struct obj *o = as(*handle, kind);
    CHECK(o, "wrong handle kind");
    record("%s %d", symbol, o->id);
    if (kind == BUFFER) free(o->data);
    free(o);
    *handle = NULL;
    return 0;
}

#define RELEASE(name, kind) \
    int name(void **handle) { return release(handle, kind, #name); }

RELEASE(e5rt_execution_stream_operation_release, OPERATION)
RELEASE(e5rt_precompiled_compute_op_create_options_release, OPOPTS)
RELEASE(e5rt_program_function_release, FUNCTION)
RELEASE(e5rt_program_library_release, LIBRARY)
RELEASE(e5rt_buffer_object_release, BUFFER)
RELEASE(e5rt_io_port_release, PORT)
RELEASE(e5rt_execution_stream_release, STREAM)
RELEASE(e5rt_e5_compiler_release, COMPILER)
RELEASE(e5rt_e5_compiler_options_release, OPTIONS)
RELEASE(e5rt_e5_compiler_config_options_release, CONFIG)
