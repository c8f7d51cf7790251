/* f4pipe's HIP runtime shim: the libamdhip64.so functions f4pipe's HipDevice calls, backed by
 * host memory and f4pipe's gfx950 emulator. Not a GPU, and it says so: the device is named
 * F4PIPE_SHIM_DEVICE_NAME and f4pipe keys its artifacts "hip-shim-emulator".
 *
 * Why: hip-python's bindings and f4pipe's HIP path can then run for real on a machine without
 * ROCm. This file is the HIP API surface only (argument and handle checks, the `extra` array,
 * the memory table, events on the host wall clock, error names, a call log). What needs the
 * code object (its metadata, the launch checks, the emulator) lives in Python
 * (f4pipe/hipshim/backend.py) and is reached through the callbacks of f4pipe_shim_attach.
 *
 * Built by f4pipe.hipshim.build_shim with the system C compiler, which passes
 * F4PIPE_SHIM_DEVICE_NAME, F4PIPE_SHIM_ARCH, F4PIPE_SHIM_HIP_VERSION (HIP's
 * major * 10000000 + minor * 100000 + patch, as hipRuntimeGetVersion reports it) and
 * F4PIPE_SHIM_LDS_BYTES (f4pipe.gfx950.LDS_BYTES_PER_CU).
 *
 * Everything runs synchronously on the calling thread: a launch has finished when
 * hipModuleLaunchKernel returns, so streams are only the null stream and events read the
 * clock when they are recorded.
 */

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifndef F4PIPE_SHIM_DEVICE_NAME
#error "build with -DF4PIPE_SHIM_DEVICE_NAME=... (f4pipe.hipshim.build_shim does)"
#endif
#ifndef F4PIPE_SHIM_ARCH
#error "build with -DF4PIPE_SHIM_ARCH=..."
#endif
#ifndef F4PIPE_SHIM_HIP_VERSION
#error "build with -DF4PIPE_SHIM_HIP_VERSION=..."
#endif
#ifndef F4PIPE_SHIM_LDS_BYTES
#error "build with -DF4PIPE_SHIM_LDS_BYTES=..."
#endif

#define EXPORT __attribute__((visibility("default")))

/* hipError_t values as HIP defines them (hip_runtime_api.h); the tests compare every name
 * below with hip-python's hipError_t enum. */
typedef int hipError_t;
enum {
    hipSuccess = 0,
    hipErrorInvalidValue = 1,
    hipErrorOutOfMemory = 2,
    hipErrorNotInitialized = 3,
    hipErrorInvalidConfiguration = 9,
    hipErrorInvalidDevicePointer = 17,
    hipErrorInvalidMemcpyDirection = 21,
    hipErrorNoDevice = 100,
    hipErrorInvalidDevice = 101,
    hipErrorInvalidImage = 200,
    hipErrorNoBinaryForGpu = 209,
    hipErrorInvalidHandle = 400,
    hipErrorNotFound = 500,
    hipErrorNotReady = 600,
    hipErrorLaunchFailure = 719,
    hipErrorNotSupported = 801,
};

struct error_text {
    hipError_t code;
    const char *name;
    const char *text;
};

static const struct error_text ERRORS[] = {
    {hipSuccess, "hipSuccess", "no error"},
    {hipErrorInvalidValue, "hipErrorInvalidValue", "invalid argument"},
    {hipErrorOutOfMemory, "hipErrorOutOfMemory", "out of memory"},
    {hipErrorNotInitialized, "hipErrorNotInitialized", "initialization error"},
    {hipErrorInvalidConfiguration, "hipErrorInvalidConfiguration", "invalid configuration argument"},
    {hipErrorInvalidDevicePointer, "hipErrorInvalidDevicePointer", "invalid device pointer"},
    {hipErrorInvalidMemcpyDirection, "hipErrorInvalidMemcpyDirection", "invalid copy direction for memcpy"},
    {hipErrorNoDevice, "hipErrorNoDevice", "no ROCm-capable device is detected"},
    {hipErrorInvalidDevice, "hipErrorInvalidDevice", "invalid device ordinal"},
    {hipErrorInvalidImage, "hipErrorInvalidImage", "device kernel image is invalid"},
    {hipErrorNoBinaryForGpu, "hipErrorNoBinaryForGpu", "no kernel image is available for execution on the device"},
    {hipErrorInvalidHandle, "hipErrorInvalidHandle", "invalid resource handle"},
    {hipErrorNotFound, "hipErrorNotFound", "named symbol not found"},
    {hipErrorNotReady, "hipErrorNotReady", "device not ready"},
    {hipErrorLaunchFailure, "hipErrorLaunchFailure", "unspecified launch failure"},
    {hipErrorNotSupported, "hipErrorNotSupported", "operation not supported"},
};

/* --- the Python backend (f4pipe/hipshim/backend.py) ----------------------------------------
 * Every callback returns a hipError_t and, on failure, writes one line into msg. */

struct f4pipe_shim_buffer {
    uint64_t device_addr;
    void *host;
    uint64_t nbytes;
};

struct f4pipe_shim_launch {
    uint64_t module;
    const char *function;
    uint32_t grid[3];
    uint32_t block[3];
    uint32_t shared_mem_bytes;
    const void *kernarg;
    uint64_t kernarg_size;
    uint64_t num_buffers;
    const struct f4pipe_shim_buffer *buffers;
};

typedef int (*alloc_fn)(uint64_t nbytes, uint64_t *device_addr, char *msg, uint64_t cap);
typedef int (*free_fn)(uint64_t device_addr, char *msg, uint64_t cap);
typedef int (*load_fn)(uint64_t module, const void *image, uint64_t size, char *msg, uint64_t cap);
typedef int (*unload_fn)(uint64_t module, char *msg, uint64_t cap);
typedef int (*function_fn)(uint64_t module, const char *name, char *msg, uint64_t cap);
typedef int (*launch_fn)(const struct f4pipe_shim_launch *launch, char *msg, uint64_t cap);

static struct {
    alloc_fn alloc;
    free_fn free;
    load_fn load;
    unload_fn unload;
    function_fn function;
    launch_fn launch;
} backend;

/* --- call log and the last failure ------------------------------------------------------ */

static char *call_log;
static size_t call_log_len, call_log_cap;

static void log_call(const char *entry) {
    size_t n = strlen(entry);
    if (call_log_len + n + 2 > call_log_cap) {
        size_t cap = call_log_cap ? call_log_cap * 2 : 4096;
        while (cap < call_log_len + n + 2) cap *= 2;
        char *grown = realloc(call_log, cap);
        if (!grown) return;
        call_log = grown;
        call_log_cap = cap;
    }
    memcpy(call_log + call_log_len, entry, n);
    call_log_len += n;
    call_log[call_log_len++] = '\n';
    call_log[call_log_len] = '\0';
}

#define DETAIL_CAP 2048
static hipError_t last_error = hipSuccess;
static hipError_t detail_code = hipSuccess;
static char detail[DETAIL_CAP];
static char error_string[DETAIL_CAP + 128];

/* Record a failure with its one-line explanation; hipGetErrorString(code) then carries it. */
static hipError_t fail(hipError_t code, const char *what, const char *why) {
    last_error = code;
    detail_code = code;
    snprintf(detail, sizeof detail, "%s: %s", what, why);
    return code;
}

/* A failure whose text came from the backend (already in `detail` after the call). */
static hipError_t backend_result(hipError_t code, const char *what, const char *msg) {
    if (code == hipSuccess) return hipSuccess;
    return fail(code, what, msg[0] ? msg : "refused by the emulator backend");
}

static hipError_t need_backend(const char *what) {
    if (backend.launch) return hipSuccess;
    return fail(hipErrorNotInitialized, what,
                "no emulator attached to the f4pipe HIP shim (f4pipe.hipshim.attach_emulator)");
}

/* --- handle registries ---------------------------------------------------------------------
 * HIP hands out opaque pointers; the shim keeps every live one in a list, so a stale, freed or
 * foreign handle is an error instead of a crash. */

enum kind { MODULE = 1, FUNCTION, EVENT };

struct object {
    enum kind kind;
    uint64_t id;           /* module id (MODULE, FUNCTION) */
    char name[512];        /* kernel name (FUNCTION) */
    int recorded;          /* EVENT */
    double ms;             /* EVENT: host monotonic clock at record, milliseconds */
};

static struct object **objects;
static size_t num_objects, cap_objects;
static uint64_t next_module_id = 1;

static struct object *new_object(enum kind kind) {
    if (num_objects == cap_objects) {
        size_t cap = cap_objects ? cap_objects * 2 : 64;
        struct object **grown = realloc(objects, cap * sizeof *objects);
        if (!grown) return NULL;
        objects = grown;
        cap_objects = cap;
    }
    struct object *obj = calloc(1, sizeof *obj);
    if (!obj) return NULL;
    obj->kind = kind;
    objects[num_objects++] = obj;
    return obj;
}

static struct object *find_object(const void *handle, enum kind kind) {
    for (size_t i = 0; i < num_objects; i++)
        if (objects[i] == handle && objects[i]->kind == kind) return objects[i];
    return NULL;
}

static void drop_object(struct object *obj) {
    for (size_t i = 0; i < num_objects; i++) {
        if (objects[i] == obj) {
            objects[i] = objects[--num_objects];
            free(obj);
            return;
        }
    }
}

/* --- memory: device addresses from the backend, bytes in host memory ---------------------- */

static struct f4pipe_shim_buffer *buffers;
static size_t num_buffers, cap_buffers;

/* The buffer holding [addr, addr + n), or NULL. */
static struct f4pipe_shim_buffer *find_range(uint64_t addr, uint64_t n) {
    for (size_t i = 0; i < num_buffers; i++) {
        struct f4pipe_shim_buffer *b = &buffers[i];
        if (addr >= b->device_addr && addr - b->device_addr <= b->nbytes &&
            n <= b->nbytes - (addr - b->device_addr))
            return b;
    }
    return NULL;
}

static void *host_of(uint64_t addr, uint64_t n) {
    struct f4pipe_shim_buffer *b = find_range(addr, n);
    return b ? (char *)b->host + (addr - b->device_addr) : NULL;
}

/* --- the attach API (not HIP; used by f4pipe.hipshim) ------------------------------------ */

EXPORT void f4pipe_shim_attach(alloc_fn a, free_fn f, load_fn l, unload_fn u, function_fn fn,
                               launch_fn launch) {
    backend.alloc = a;
    backend.free = f;
    backend.load = l;
    backend.unload = u;
    backend.function = fn;
    backend.launch = launch;
}

EXPORT int f4pipe_shim_attached(void) { return backend.launch != NULL; }
EXPORT const char *f4pipe_shim_call_log(void) { return call_log ? call_log : ""; }
EXPORT void f4pipe_shim_clear_call_log(void) {
    call_log_len = 0;
    if (call_log) call_log[0] = '\0';
}
EXPORT uint64_t f4pipe_shim_live_allocations(void) { return num_buffers; }
EXPORT uint64_t f4pipe_shim_live_handles(void) { return num_objects; }

/* --- device ------------------------------------------------------------------------------ */

EXPORT hipError_t hipInit(unsigned int flags) {
    log_call("hipInit");
    return flags ? fail(hipErrorInvalidValue, "hipInit", "flags must be 0") : hipSuccess;
}

EXPORT hipError_t hipRuntimeGetVersion(int *version) {
    log_call("hipRuntimeGetVersion");
    if (!version) return fail(hipErrorInvalidValue, "hipRuntimeGetVersion", "null pointer");
    *version = F4PIPE_SHIM_HIP_VERSION;
    return hipSuccess;
}

EXPORT hipError_t hipDriverGetVersion(int *version) {
    log_call("hipDriverGetVersion");
    if (!version) return fail(hipErrorInvalidValue, "hipDriverGetVersion", "null pointer");
    *version = F4PIPE_SHIM_HIP_VERSION;
    return hipSuccess;
}

EXPORT hipError_t hipGetDeviceCount(int *count) {
    log_call("hipGetDeviceCount");
    if (!count) return fail(hipErrorInvalidValue, "hipGetDeviceCount", "null pointer");
    *count = 1;
    return hipSuccess;
}

static int current_device;

EXPORT hipError_t hipSetDevice(int device) {
    log_call("hipSetDevice");
    if (device != 0) return fail(hipErrorInvalidDevice, "hipSetDevice", "the shim has device 0 only");
    current_device = device;
    return hipSuccess;
}

EXPORT hipError_t hipGetDevice(int *device) {
    log_call("hipGetDevice");
    if (!device) return fail(hipErrorInvalidValue, "hipGetDevice", "null pointer");
    *device = current_device;
    return hipSuccess;
}

/* hipDeviceProp_tR0600, field for field (hip_runtime_api.h of ROCm 6.0 and later; every
 * hip-python release f4pipe supports binds hipGetDevicePropertiesR0600 to it). */
struct hipDeviceProp_tR0600 {
    char name[256];
    char uuid[16];
    char luid[8];
    unsigned int luidDeviceNodeMask;
    size_t totalGlobalMem;
    size_t sharedMemPerBlock;
    int regsPerBlock;
    int warpSize;
    size_t memPitch;
    int maxThreadsPerBlock;
    int maxThreadsDim[3];
    int maxGridSize[3];
    int clockRate;
    size_t totalConstMem;
    int major;
    int minor;
    size_t textureAlignment;
    size_t texturePitchAlignment;
    int deviceOverlap;
    int multiProcessorCount;
    int kernelExecTimeoutEnabled;
    int integrated;
    int canMapHostMemory;
    int computeMode;
    int maxTexture1D;
    int maxTexture1DMipmap;
    int maxTexture1DLinear;
    int maxTexture2D[2];
    int maxTexture2DMipmap[2];
    int maxTexture2DLinear[3];
    int maxTexture2DGather[2];
    int maxTexture3D[3];
    int maxTexture3DAlt[3];
    int maxTextureCubemap;
    int maxTexture1DLayered[2];
    int maxTexture2DLayered[3];
    int maxTextureCubemapLayered[2];
    int maxSurface1D;
    int maxSurface2D[2];
    int maxSurface3D[3];
    int maxSurface1DLayered[2];
    int maxSurface2DLayered[3];
    int maxSurfaceCubemap;
    int maxSurfaceCubemapLayered[2];
    size_t surfaceAlignment;
    int concurrentKernels;
    int ECCEnabled;
    int pciBusID;
    int pciDeviceID;
    int pciDomainID;
    int tccDriver;
    int asyncEngineCount;
    int unifiedAddressing;
    int memoryClockRate;
    int memoryBusWidth;
    int l2CacheSize;
    int persistingL2CacheMaxSize;
    int maxThreadsPerMultiProcessor;
    int streamPrioritiesSupported;
    int globalL1CacheSupported;
    int localL1CacheSupported;
    size_t sharedMemPerMultiprocessor;
    int regsPerMultiprocessor;
    int managedMemory;
    int isMultiGpuBoard;
    int multiGpuBoardGroupID;
    int hostNativeAtomicSupported;
    int singleToDoublePrecisionPerfRatio;
    int pageableMemoryAccess;
    int concurrentManagedAccess;
    int computePreemptionSupported;
    int canUseHostPointerForRegisteredMem;
    int cooperativeLaunch;
    int cooperativeMultiDeviceLaunch;
    size_t sharedMemPerBlockOptin;
    int pageableMemoryAccessUsesHostPageTables;
    int directManagedMemAccessFromHost;
    int maxBlocksPerMultiProcessor;
    int accessPolicyMaxWindowSize;
    size_t reservedSharedMemPerBlock;
    int hostRegisterSupported;
    int sparseHipArraySupported;
    int hostRegisterReadOnlySupported;
    int timelineSemaphoreInteropSupported;
    int memoryPoolsSupported;
    int gpuDirectRDMASupported;
    unsigned int gpuDirectRDMAFlushWritesOptions;
    int gpuDirectRDMAWritesOrdering;
    unsigned int memoryPoolSupportedHandleTypes;
    int deferredMappingHipArraySupported;
    int ipcEventSupported;
    int clusterLaunch;
    int unifiedFunctionPointers;
    int reserved[63];
    int hipReserved[32];
    char gcnArchName[256];
    size_t maxSharedMemoryPerMultiProcessor;
    int clockInstructionRate;
    unsigned int arch; /* hipDeviceArch_t: 32 one-bit flags */
    unsigned int *hdpMemFlushCntl;
    unsigned int *hdpRegFlushCntl;
    int cooperativeMultiDeviceUnmatchedFunc;
    int cooperativeMultiDeviceUnmatchedGridDim;
    int cooperativeMultiDeviceUnmatchedBlockDim;
    int cooperativeMultiDeviceUnmatchedSharedMem;
    int isLargeBar;
    int asicRevision;
};

#define LDS_BYTES F4PIPE_SHIM_LDS_BYTES /* gfx950 LDS per workgroup */

EXPORT hipError_t hipGetDevicePropertiesR0600(struct hipDeviceProp_tR0600 *prop, int device) {
    log_call("hipGetDeviceProperties");
    if (!prop) return fail(hipErrorInvalidValue, "hipGetDeviceProperties", "null pointer");
    if (device != 0)
        return fail(hipErrorInvalidDevice, "hipGetDeviceProperties", "the shim has device 0 only");
    memset(prop, 0, sizeof *prop);
    snprintf(prop->name, sizeof prop->name, "%s", F4PIPE_SHIM_DEVICE_NAME);
    snprintf(prop->gcnArchName, sizeof prop->gcnArchName, "%s", F4PIPE_SHIM_ARCH);
    prop->totalGlobalMem = (size_t)1 << 34;
    prop->sharedMemPerBlock = LDS_BYTES;
    prop->sharedMemPerBlockOptin = LDS_BYTES;
    prop->maxSharedMemoryPerMultiProcessor = LDS_BYTES;
    prop->sharedMemPerMultiprocessor = LDS_BYTES;
    prop->regsPerBlock = 512 * 64;
    prop->warpSize = 64;
    prop->maxThreadsPerBlock = 1024;
    prop->maxThreadsDim[0] = prop->maxThreadsDim[1] = prop->maxThreadsDim[2] = 1024;
    prop->maxGridSize[0] = prop->maxGridSize[1] = prop->maxGridSize[2] = 0x7fffffff;
    prop->major = 9;
    prop->minor = 5;
    prop->multiProcessorCount = 256; /* the MI355X's, so the tile heuristic chooses as on it */
    prop->maxThreadsPerMultiProcessor = 2048;
    prop->unifiedAddressing = 1;
    prop->asicRevision = 0;
    return hipSuccess;
}

EXPORT hipError_t hipDeviceSynchronize(void) {
    log_call("hipDeviceSynchronize");
    return hipSuccess; /* every call already ran to completion */
}

EXPORT hipError_t hipGetLastError(void) {
    log_call("hipGetLastError");
    hipError_t err = last_error;
    last_error = hipSuccess;
    return err;
}

EXPORT hipError_t hipPeekAtLastError(void) {
    log_call("hipPeekAtLastError");
    return last_error;
}

EXPORT const char *hipGetErrorName(hipError_t code) {
    for (size_t i = 0; i < sizeof ERRORS / sizeof ERRORS[0]; i++)
        if (ERRORS[i].code == code) return ERRORS[i].name;
    return "hipErrorUnknown";
}

/* HIP's text for `code`; when the shim's last failure had this code, followed by why. */
EXPORT const char *hipGetErrorString(hipError_t code) {
    const char *text = "unknown error";
    for (size_t i = 0; i < sizeof ERRORS / sizeof ERRORS[0]; i++)
        if (ERRORS[i].code == code) text = ERRORS[i].text;
    if (code != hipSuccess && code == detail_code && detail[0]) {
        snprintf(error_string, sizeof error_string, "%s (f4pipe HIP shim: %s)", text, detail);
        return error_string;
    }
    return text;
}

/* --- memory ------------------------------------------------------------------------------- */

#define FRESH_BYTE 0xCD /* fresh allocations hold this, as device memory holds garbage */

EXPORT hipError_t hipMalloc(void **ptr, size_t size) {
    log_call("hipMalloc");
    char msg[DETAIL_CAP] = "";
    if (!ptr) return fail(hipErrorInvalidValue, "hipMalloc", "null pointer");
    if (need_backend("hipMalloc")) return last_error;
    if (size == 0) {
        *ptr = NULL;
        return hipSuccess;
    }
    if (num_buffers == cap_buffers) {
        size_t cap = cap_buffers ? cap_buffers * 2 : 64;
        struct f4pipe_shim_buffer *grown = realloc(buffers, cap * sizeof *buffers);
        if (!grown) return fail(hipErrorOutOfMemory, "hipMalloc", "host realloc failed");
        buffers = grown;
        cap_buffers = cap;
    }
    void *host = malloc(size);
    if (!host) return fail(hipErrorOutOfMemory, "hipMalloc", "host malloc failed");
    uint64_t addr = 0;
    int err = backend.alloc(size, &addr, msg, sizeof msg);
    if (err != hipSuccess) {
        free(host);
        return backend_result(err, "hipMalloc", msg);
    }
    memset(host, FRESH_BYTE, size);
    buffers[num_buffers++] = (struct f4pipe_shim_buffer){addr, host, size};
    *ptr = (void *)(uintptr_t)addr;
    return hipSuccess;
}

EXPORT hipError_t hipFree(void *ptr) {
    log_call("hipFree");
    char msg[DETAIL_CAP] = "";
    if (!ptr) return hipSuccess;
    uint64_t addr = (uint64_t)(uintptr_t)ptr;
    for (size_t i = 0; i < num_buffers; i++) {
        if (buffers[i].device_addr == addr) {
            int err = backend.free(addr, msg, sizeof msg);
            if (err != hipSuccess) return backend_result(err, "hipFree", msg);
            free(buffers[i].host);
            buffers[i] = buffers[--num_buffers];
            return hipSuccess;
        }
    }
    snprintf(msg, sizeof msg, "%#llx is not the start of a live allocation",
             (unsigned long long)addr);
    return fail(hipErrorInvalidDevicePointer, "hipFree", msg);
}

enum { HtoH = 0, HtoD = 1, DtoH = 2, DtoD = 3, DEFAULT = 4 };

EXPORT hipError_t hipMemcpy(void *dst, const void *src, size_t n, int kind) {
    log_call("hipMemcpy");
    char msg[256];
    uint64_t d = (uint64_t)(uintptr_t)dst, s = (uint64_t)(uintptr_t)src;
    void *dst_dev = host_of(d, n);
    const void *src_dev = host_of(s, n);
    if (kind == DEFAULT) kind = (src_dev ? 2 : 0) | (dst_dev ? 1 : 0);
    if (kind < HtoH || kind > DtoD)
        return fail(hipErrorInvalidMemcpyDirection, "hipMemcpy", "unknown hipMemcpyKind");
    int want_dst_dev = kind & 1, want_src_dev = (kind & 2) != 0;
    if (n == 0) return hipSuccess;
    if (want_dst_dev && !dst_dev) {
        snprintf(msg, sizeof msg, "destination %#llx..+%zu is not inside one device allocation",
                 (unsigned long long)d, n);
        return fail(hipErrorInvalidValue, "hipMemcpy", msg);
    }
    if (want_src_dev && !src_dev) {
        snprintf(msg, sizeof msg, "source %#llx..+%zu is not inside one device allocation",
                 (unsigned long long)s, n);
        return fail(hipErrorInvalidValue, "hipMemcpy", msg);
    }
    if ((!want_dst_dev && !dst) || (!want_src_dev && !src))
        return fail(hipErrorInvalidValue, "hipMemcpy", "null host pointer");
    memmove(want_dst_dev ? dst_dev : dst, want_src_dev ? src_dev : src, n);
    return hipSuccess;
}

static hipError_t memset_device(const char *what, void *dst, int value, size_t n) {
    char msg[256];
    uint64_t d = (uint64_t)(uintptr_t)dst;
    void *host = host_of(d, n);
    if (!host) {
        snprintf(msg, sizeof msg, "%#llx..+%zu is not inside one device allocation",
                 (unsigned long long)d, n);
        return fail(hipErrorInvalidValue, what, msg);
    }
    memset(host, value, n);
    return hipSuccess;
}

EXPORT hipError_t hipMemset(void *dst, int value, size_t n) {
    log_call("hipMemset");
    return memset_device("hipMemset", dst, value, n);
}

EXPORT hipError_t hipMemsetAsync(void *dst, int value, size_t n, void *stream) {
    log_call("hipMemsetAsync");
    if (stream) return fail(hipErrorInvalidHandle, "hipMemsetAsync", "the shim has the null stream only");
    return memset_device("hipMemsetAsync", dst, value, n);
}

/* --- modules -------------------------------------------------------------------------------- */

/* Bytes of an ELF64 image: up to the end of its section or program header table, whichever
 * ends later (hipModuleLoadData gets no size; the header says it). 0 when not ELF64. */
static uint64_t elf_size(const unsigned char *image) {
    if (memcmp(image, "\177ELF", 4) != 0 || image[4] != 2 /* ELFCLASS64 */) return 0;
    uint64_t phoff, shoff;
    uint16_t phentsize, phnum, shentsize, shnum;
    memcpy(&phoff, image + 0x20, 8);
    memcpy(&shoff, image + 0x28, 8);
    memcpy(&phentsize, image + 0x36, 2);
    memcpy(&phnum, image + 0x38, 2);
    memcpy(&shentsize, image + 0x3a, 2);
    memcpy(&shnum, image + 0x3c, 2);
    uint64_t end_sh = shoff + (uint64_t)shentsize * shnum;
    uint64_t end_ph = phoff + (uint64_t)phentsize * phnum;
    return end_sh > end_ph ? end_sh : end_ph;
}

EXPORT hipError_t hipModuleLoadData(void **module, const void *image) {
    log_call("hipModuleLoadData");
    char msg[DETAIL_CAP] = "";
    if (!module || !image) return fail(hipErrorInvalidValue, "hipModuleLoadData", "null pointer");
    if (need_backend("hipModuleLoadData")) return last_error;
    uint64_t size = elf_size(image);
    if (!size) return fail(hipErrorInvalidImage, "hipModuleLoadData", "the image is not an ELF64 code object");
    struct object *obj = new_object(MODULE);
    if (!obj) return fail(hipErrorOutOfMemory, "hipModuleLoadData", "host calloc failed");
    obj->id = next_module_id++;
    int err = backend.load(obj->id, image, size, msg, sizeof msg);
    if (err != hipSuccess) {
        drop_object(obj);
        return backend_result(err, "hipModuleLoadData", msg);
    }
    *module = obj;
    return hipSuccess;
}

EXPORT hipError_t hipModuleUnload(void *module) {
    log_call("hipModuleUnload");
    char msg[DETAIL_CAP] = "";
    struct object *obj = find_object(module, MODULE);
    if (!obj) return fail(hipErrorInvalidHandle, "hipModuleUnload", "not a loaded module");
    int err = backend.unload(obj->id, msg, sizeof msg);
    if (err != hipSuccess) return backend_result(err, "hipModuleUnload", msg);
    for (size_t i = num_objects; i-- > 0;)
        if (objects[i]->kind == FUNCTION && objects[i]->id == obj->id) drop_object(objects[i]);
    drop_object(obj);
    return hipSuccess;
}

EXPORT hipError_t hipModuleGetFunction(void **function, void *module, const char *name) {
    log_call("hipModuleGetFunction");
    char msg[DETAIL_CAP] = "";
    if (!function || !name) return fail(hipErrorInvalidValue, "hipModuleGetFunction", "null pointer");
    struct object *mod = find_object(module, MODULE);
    if (!mod) return fail(hipErrorInvalidHandle, "hipModuleGetFunction", "not a loaded module");
    if (strlen(name) >= sizeof mod->name)
        return fail(hipErrorInvalidValue, "hipModuleGetFunction", "kernel name too long");
    int err = backend.function(mod->id, name, msg, sizeof msg);
    if (err != hipSuccess) return backend_result(err, "hipModuleGetFunction", msg);
    struct object *fn = new_object(FUNCTION);
    if (!fn) return fail(hipErrorOutOfMemory, "hipModuleGetFunction", "host calloc failed");
    fn->id = mod->id;
    snprintf(fn->name, sizeof fn->name, "%s", name);
    *function = fn;
    return hipSuccess;
}

/* The `extra` launch array HIP documents: {HIP_LAUNCH_PARAM_BUFFER_POINTER, args,
 * HIP_LAUNCH_PARAM_BUFFER_SIZE, &size, HIP_LAUNCH_PARAM_END}. */
#define HIP_LAUNCH_PARAM_BUFFER_POINTER ((void *)1)
#define HIP_LAUNCH_PARAM_BUFFER_SIZE ((void *)2)
#define HIP_LAUNCH_PARAM_END ((void *)3)

EXPORT hipError_t hipModuleLaunchKernel(void *function, unsigned int gx, unsigned int gy,
                                        unsigned int gz, unsigned int bx, unsigned int by,
                                        unsigned int bz, unsigned int shared_mem_bytes,
                                        void *stream, void **kernel_params, void **extra) {
    char msg[DETAIL_CAP] = "";
    struct object *fn = find_object(function, FUNCTION);
    log_call(kernel_params ? "hipModuleLaunchKernel(kernelParams)"
             : extra       ? "hipModuleLaunchKernel(extra)"
                           : "hipModuleLaunchKernel()");
    if (!fn) return fail(hipErrorInvalidHandle, "hipModuleLaunchKernel", "not a kernel function");
    if (stream) return fail(hipErrorInvalidHandle, "hipModuleLaunchKernel", "the shim has the null stream only");
    if (kernel_params)
        return fail(hipErrorNotSupported, "hipModuleLaunchKernel",
                    "kernelParams: the shim takes the kernarg block through `extra` only");
    if (!extra)
        return fail(hipErrorInvalidValue, "hipModuleLaunchKernel", "neither kernelParams nor extra");
    if (extra[0] != HIP_LAUNCH_PARAM_BUFFER_POINTER || extra[2] != HIP_LAUNCH_PARAM_BUFFER_SIZE ||
        extra[4] != HIP_LAUNCH_PARAM_END || !extra[1] || !extra[3])
        return fail(hipErrorInvalidValue, "hipModuleLaunchKernel",
                    "extra must be {HIP_LAUNCH_PARAM_BUFFER_POINTER, args, "
                    "HIP_LAUNCH_PARAM_BUFFER_SIZE, &size, HIP_LAUNCH_PARAM_END}");
    if (need_backend("hipModuleLaunchKernel")) return last_error;
    struct f4pipe_shim_launch launch = {
        .module = fn->id,
        .function = fn->name,
        .grid = {gx, gy, gz},
        .block = {bx, by, bz},
        .shared_mem_bytes = shared_mem_bytes,
        .kernarg = extra[1],
        .kernarg_size = *(size_t *)extra[3],
        .num_buffers = num_buffers,
        .buffers = buffers,
    };
    int err = backend.launch(&launch, msg, sizeof msg);
    return backend_result(err, "hipModuleLaunchKernel", msg);
}

/* --- events: the host's monotonic clock, read when recorded ------------------------------- */

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

EXPORT hipError_t hipEventCreate(void **event) {
    log_call("hipEventCreate");
    if (!event) return fail(hipErrorInvalidValue, "hipEventCreate", "null pointer");
    struct object *obj = new_object(EVENT);
    if (!obj) return fail(hipErrorOutOfMemory, "hipEventCreate", "host calloc failed");
    *event = obj;
    return hipSuccess;
}

EXPORT hipError_t hipEventRecord(void *event, void *stream) {
    log_call("hipEventRecord");
    struct object *obj = find_object(event, EVENT);
    if (!obj) return fail(hipErrorInvalidHandle, "hipEventRecord", "not a live event");
    if (stream) return fail(hipErrorInvalidHandle, "hipEventRecord", "the shim has the null stream only");
    obj->recorded = 1;
    obj->ms = now_ms();
    return hipSuccess;
}

EXPORT hipError_t hipEventSynchronize(void *event) {
    log_call("hipEventSynchronize");
    if (!find_object(event, EVENT))
        return fail(hipErrorInvalidHandle, "hipEventSynchronize", "not a live event");
    return hipSuccess;
}

EXPORT hipError_t hipEventElapsedTime(float *ms, void *start, void *stop) {
    log_call("hipEventElapsedTime");
    struct object *a = find_object(start, EVENT), *b = find_object(stop, EVENT);
    if (!ms) return fail(hipErrorInvalidValue, "hipEventElapsedTime", "null pointer");
    if (!a || !b) return fail(hipErrorInvalidHandle, "hipEventElapsedTime", "not a live event");
    if (!a->recorded || !b->recorded)
        return fail(hipErrorNotReady, "hipEventElapsedTime", "an event was never recorded");
    *ms = (float)(b->ms - a->ms);
    return hipSuccess;
}

EXPORT hipError_t hipEventDestroy(void *event) {
    log_call("hipEventDestroy");
    struct object *obj = find_object(event, EVENT);
    if (!obj) return fail(hipErrorInvalidHandle, "hipEventDestroy", "not a live event");
    drop_object(obj);
    return hipSuccess;
}
