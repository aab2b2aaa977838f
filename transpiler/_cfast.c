/* tilex._cfast: the stdlib fast path's replay in C (see tilex.stdlib._launch.fastpath and tilex.cfast).

A `FastCall` wraps one library wrapper. Calling it (vectorcall) does, in one C function, what a fast-path hit
does in Python: read each argument's layout (per tensor its type, shape, strides, dtype, address modulo 16 and
device; per scalar option its type and value; the keyword names), look the layout up among the entries Python
registered (`FastCall.register`, after a recorded full call), check the entry's age, allocate the outputs with
the recorded torch.empty call, and launch each recorded kernel with cuLaunchKernelEx on torch's current stream,
the parameter buffer patched with this call's addresses. Anything else (the fast path off, a layout not
registered, an argument this module does not key on such as a NumPy scalar, another device current, the driver
refusing the first launch) calls the Python wrapper (`slow`) with the same arguments, so every check and every
clear error of the full path stays.

Only the CPython C API is used. The CUDA driver is opened with dlopen at first use (`load_driver`); tests inject
stand-in functions (`set_driver`). Each launch packs its parameters into a buffer on this call's stack; the
GIL is released only around the driver's launch call. The entry's cached TMA maps are shared between calls:
see replay for how a map is copied without a Python call between its check and its use.
*/
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <dlfcn.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#define MAX_ARGS 64      /* arguments (positional + keyword values) a call may have for the C path */
#define MAX_SIG 1024     /* int64 words of one call's layout */
#define MAX_OUTS 32      /* outputs an entry allocates */
#define MAX_PARAMS 256   /* kernel parameters of one launch */
#define MAX_BLOB 8192    /* bytes of one launch's parameters (each parameter 16-byte aligned) */
#define TMA_BYTES 128
#ifndef TILEX_CFAST_SHA
#define TILEX_CFAST_SHA "" /* setup.py and tilex.cfast.build pass this file's hash: a stale build is not used */
#endif

enum { TAG_TENSOR = 1, TAG_NONE = 2, TAG_BOOL = 3, TAG_INT = 4, TAG_FLOAT = 5, TAG_STR = 6 };

/* cuda.h's CUlaunchConfig (CUDA >= 12.0) */
typedef struct {
    unsigned int gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes;
    void *hStream;
    void *attrs;
    unsigned int numAttrs;
} LaunchConfig;

typedef int (*launch_fn)(const LaunchConfig *, void *, void **, void **);
typedef int (*ctx_fn)(void **);

static launch_fn g_launch = NULL;
static ctx_fn g_ctx = NULL;
static void *g_lib = NULL;
static PyObject *g_launch_error = NULL; /* tilex.diagnostics.LaunchError (configure) */
static PyObject *g_tensor_types = NULL; /* the set of torch tensor types (configure) */
static PyObject *g_monotonic = NULL;    /* time.monotonic */
static unsigned long long g_hits = 0;   /* C-path hits (also counted into STATS["hit"]) */

static PyObject *s_FASTPATH, *s_POISON, *s_CFAST, *s_TLS, *s_OUTPUT, *s_rec, *s_fn, *s_RECHECK_S, *s_STATS,
    *s_hit, *s_monotonic, *s_data_ptr, *s_shape, *s_stride, *s_dtype, *s_device, *s_DRIVER, *s_CFAST_LAUNCHER,
    *s_launcher;

/* ------------------------------------------------------------------ the entry of one recorded layout */

typedef struct {
    int slot;    /* parameter index */
    int src;     /* index into the call's address list: argument i, or nargs + output j */
    int64_t off; /* byte offset added to that address */
} Patch;

typedef struct {
    int slot, src;
    int64_t off;
    PyObject *encode; /* address -> the 128 bytes of the TMA map there */
    uintptr_t ptr;    /* the address `bytes` was encoded for */
    unsigned char bytes[TMA_BYTES];
} MapPatch;

typedef struct {
    void *function;
    unsigned int grid[3], block, smem;
    int nparams;
    Py_ssize_t blob_size;
    unsigned char *blob; /* the parameters as recorded (scalars, symbols; pointers and maps patched per call) */
    Py_ssize_t *offsets; /* of each parameter in blob */
    int npatch, nmaps;
    Patch *patches;
    MapPatch *maps;
} Launch;

typedef struct {
    PyObject_HEAD
    int nsig;
    int64_t *sig;
    Py_ssize_t nargs, npos;
    PyObject *kwnames; /* tuple, or NULL */
    int nobjs;
    PyObject **objs; /* compared with == per call: each tensor's device, each str option */
    int nouts;
    PyObject **out_args, **out_kw; /* torch.empty(*out_args[j], **out_kw[j]) */
    PyObject *empty;
    int nlaunch;
    Launch *launches;
    PyObject *tmpl;
    long device;
    PyObject *device_obj;     /* int device ordinal, for stream(device) */
    PyObject *current_device; /* () -> the current device ordinal */
    PyObject *stream;         /* device -> torch's current raw stream */
    void *ctx;                /* the CUDA context current when current_device() == device held */
    double born;
    PyObject *name; /* the first kernel's name, for errors */
} Entry;

static void entry_dealloc(Entry *e) {
    PyMem_Free(e->sig);
    Py_XDECREF(e->kwnames);
    for (int i = 0; i < e->nobjs; i++) Py_XDECREF(e->objs[i]);
    PyMem_Free(e->objs);
    for (int j = 0; j < e->nouts; j++) {
        Py_XDECREF(e->out_args[j]);
        Py_XDECREF(e->out_kw[j]);
    }
    PyMem_Free(e->out_args);
    PyMem_Free(e->out_kw);
    for (int k = 0; k < e->nlaunch; k++) {
        Launch *l = &e->launches[k];
        PyMem_Free(l->blob);
        PyMem_Free(l->offsets);
        PyMem_Free(l->patches);
        for (int m = 0; m < l->nmaps; m++) Py_XDECREF(l->maps[m].encode);
        PyMem_Free(l->maps);
    }
    PyMem_Free(e->launches);
    Py_XDECREF(e->empty);
    Py_XDECREF(e->tmpl);
    Py_XDECREF(e->device_obj);
    Py_XDECREF(e->current_device);
    Py_XDECREF(e->stream);
    Py_XDECREF(e->name);
    Py_TYPE(e)->tp_free((PyObject *)e);
}

static PyObject *entry_repr(Entry *e) {
    return PyUnicode_FromFormat("<tilex._cfast entry: %d launch(es), %d output(s), %zd argument(s)>", e->nlaunch,
                                e->nouts, e->nargs);
}

static PyTypeObject EntryType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "tilex._cfast.Entry",
    .tp_basicsize = sizeof(Entry),
    .tp_dealloc = (destructor)entry_dealloc,
    .tp_repr = (reprfunc)entry_repr,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A registered fast-path layout (made by FastCall.register).",
};

/* ------------------------------------------------------------------ a call's layout */

typedef struct {
    int nsig;
    int64_t sig[MAX_SIG];
    uintptr_t addrs[MAX_ARGS + MAX_OUTS]; /* per argument its address (tensors), then the outputs' */
    int nobjs;
    PyObject *objs[MAX_ARGS]; /* new references */
} Layout;

static void layout_clear(Layout *L) {
    for (int i = 0; i < L->nobjs; i++) Py_DECREF(L->objs[i]);
    L->nobjs = 0;
}

#define PUSH(v)                                  \
    do {                                         \
        if (L->nsig >= MAX_SIG) return 0;        \
        L->sig[L->nsig++] = (int64_t)(v);        \
    } while (0)

static int tuple_ints(Layout *L, PyObject *t) {
    if (!PyTuple_Check(t)) return 0;
    Py_ssize_t n = PyTuple_GET_SIZE(t);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *x = PyTuple_GET_ITEM(t, i);
        if (!PyLong_CheckExact(x)) return 0;
        int overflow = 0;
        long long v = PyLong_AsLongLongAndOverflow(x, &overflow);
        if (overflow || (v == -1 && PyErr_Occurred())) return 0;
        PUSH(v);
    }
    return 1;
}

/* 1: the layout of args[0..n) is in L; 0: an argument the C path does not key on (L partly filled; the caller
   clears it; a Python error raised while reading is cleared here). */
static int read_layout(Layout *L, PyObject *const *args, Py_ssize_t n) {
    L->nsig = 0;
    L->nobjs = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *v = args[i];
        PyTypeObject *t = Py_TYPE(v);
        L->addrs[i] = 0;
        if (v == Py_None) {
            PUSH(TAG_NONE);
        } else if (t == &PyBool_Type) {
            PUSH(TAG_BOOL);
            PUSH(v == Py_True);
        } else if (t == &PyLong_Type) {
            int overflow = 0;
            long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
            if (overflow || (x == -1 && PyErr_Occurred())) {
                PyErr_Clear();
                return 0;
            }
            PUSH(TAG_INT);
            PUSH(x);
        } else if (t == &PyFloat_Type) {
            double d = PyFloat_AS_DOUBLE(v);
            int64_t bits;
            memcpy(&bits, &d, sizeof bits); /* exact: -0.0 is not 0.0 */
            PUSH(TAG_FLOAT);
            PUSH(bits);
        } else if (t == &PyUnicode_Type) {
            Py_hash_t h = PyObject_Hash(v);
            if (h == -1) {
                PyErr_Clear();
                return 0;
            }
            PUSH(TAG_STR);
            PUSH(h);
            Py_INCREF(v);
            L->objs[L->nobjs++] = v;
        } else {
            int is_tensor = g_tensor_types != NULL ? PySet_Contains(g_tensor_types, (PyObject *)t) : 0;
            if (is_tensor != 1) {
                if (is_tensor < 0) PyErr_Clear();
                return 0;
            }
            PyObject *p = PyObject_CallMethodNoArgs(v, s_data_ptr);
            if (p == NULL) goto fail;
            uintptr_t ptr = (uintptr_t)PyLong_AsUnsignedLongLong(p);
            Py_DECREF(p);
            if (PyErr_Occurred()) goto fail;
            PyObject *shape = PyObject_GetAttr(v, s_shape);
            if (shape == NULL) goto fail;
            Py_ssize_t nd = PyTuple_Check(shape) ? PyTuple_GET_SIZE(shape) : -1;
            if (nd < 0 || L->nsig + 3 > MAX_SIG) {
                Py_DECREF(shape);
                return 0;
            }
            L->sig[L->nsig++] = TAG_TENSOR;
            L->sig[L->nsig++] = (int64_t)(intptr_t)t;
            L->sig[L->nsig++] = nd;
            int ok = tuple_ints(L, shape);
            Py_DECREF(shape);
            if (!ok) goto fail;
            PyObject *stride = PyObject_CallMethodNoArgs(v, s_stride);
            if (stride == NULL) goto fail;
            ok = PyTuple_Check(stride) && PyTuple_GET_SIZE(stride) == nd && tuple_ints(L, stride);
            Py_DECREF(stride);
            if (!ok) goto fail;
            PyObject *dtype = PyObject_GetAttr(v, s_dtype);
            if (dtype == NULL) goto fail;
            PUSH(ptr & 15);
            PUSH((intptr_t)dtype); /* torch dtypes are singletons: compared by identity */
            Py_DECREF(dtype);      /* kept alive by torch */
            PyObject *device = PyObject_GetAttr(v, s_device);
            if (device == NULL) goto fail;
            L->objs[L->nobjs++] = device;
            L->addrs[i] = ptr;
        }
    }
    return 1;
fail:
    PyErr_Clear();
    return 0;
}

static uint64_t mix(uint64_t h, uint64_t x) {
    h ^= x + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
    return h * 0xff51afd7ed558ccdULL;
}

static uint64_t layout_hash(const Layout *L, Py_ssize_t npos, PyObject *kwnames) {
    uint64_t h = mix(0x12345678ULL, (uint64_t)npos);
    for (int i = 0; i < L->nsig; i++) h = mix(h, (uint64_t)L->sig[i]);
    if (kwnames != NULL) {
        Py_ssize_t n = PyTuple_GET_SIZE(kwnames);
        for (Py_ssize_t i = 0; i < n; i++) h = mix(h, (uint64_t)PyObject_Hash(PyTuple_GET_ITEM(kwnames, i)));
    }
    h ^= h >> 33;
    return h;
}

/* ------------------------------------------------------------------ FastCall */

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *slow;    /* the Python wrapper call (the full fast-path logic) */
    PyObject *globals; /* tilex.stdlib._launch's namespace: FASTPATH, POISON, CFAST, _TLS, OUTPUT, ... */
    PyObject *cmemo;   /* hash of a layout -> Entry */
    PyObject *dict;    /* __dict__ (functools.wraps' attributes, memo, full) */
} FastCall;

static int truthy(PyObject *g, PyObject *name, int missing) {
    PyObject *v = PyDict_GetItemWithError(g, name);
    if (v == NULL) {
        PyErr_Clear();
        return missing;
    }
    if (v == Py_True) return 1;
    if (v == Py_False) return 0;
    int r = PyObject_IsTrue(v);
    if (r < 0) {
        PyErr_Clear();
        return missing;
    }
    return r;
}

static int attr_is_none(PyObject *g, PyObject *objname, PyObject *attr) {
    PyObject *o = PyDict_GetItemWithError(g, objname);
    if (o == NULL) {
        PyErr_Clear();
        return 1;
    }
    PyObject *v = PyObject_GetAttr(o, attr);
    if (v == NULL) {
        PyErr_Clear();
        return 0;
    }
    int r = v == Py_None;
    Py_DECREF(v);
    return r;
}

/* tilex.runtime.driver.launcher is still the function the C replay stands for (_CFAST_LAUNCHER): a replaced one
   (TILEX_DIRECT_LAUNCH-like switches in benchmarks, counting or stand-in launchers in tests) is honoured by the
   Python path only */
static int own_launcher(PyObject *g) {
    PyObject *drv = PyDict_GetItemWithError(g, s_DRIVER), *want = PyDict_GetItemWithError(g, s_CFAST_LAUNCHER);
    if (drv == NULL || want == NULL || !PyDict_Check(drv)) {
        PyErr_Clear();
        return 0;
    }
    PyObject *now = PyDict_GetItemWithError(drv, s_launcher);
    if (now == NULL) PyErr_Clear();
    return now == want;
}

/* the fast path is on for this call: FASTPATH and CFAST, not POISON, driver.launcher not replaced, no recording
   running on this thread, no output arena */
static int enabled(FastCall *self) {
    PyObject *g = self->globals;
    return truthy(g, s_FASTPATH, 0) && truthy(g, s_CFAST, 0) && !truthy(g, s_POISON, 1) && own_launcher(g) &&
           attr_is_none(g, s_TLS, s_rec) && attr_is_none(g, s_OUTPUT, s_fn);
}

static double now_s(FastCall *self, int *ok) {
    PyObject *m = PyDict_GetItemWithError(self->globals, s_monotonic);
    *ok = 1;
    if (m != NULL && m != g_monotonic) { /* a stand-in clock (tests) */
        PyObject *r = PyObject_CallNoArgs(m);
        double d = r != NULL ? PyFloat_AsDouble(r) : -1.0;
        Py_XDECREF(r);
        if (PyErr_Occurred()) {
            PyErr_Clear();
            *ok = 0;
        }
        return d;
    }
    PyErr_Clear();
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts); /* time.monotonic's clock */
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int count_hit(FastCall *self) {
    g_hits++;
    PyObject *stats = PyDict_GetItemWithError(self->globals, s_STATS);
    if (stats == NULL || !PyDict_Check(stats)) {
        PyErr_Clear();
        return 0;
    }
    PyObject *cur = PyDict_GetItemWithError(stats, s_hit);
    if (cur == NULL) {
        PyErr_Clear();
        return 0;
    }
    PyObject *one = PyLong_FromLong(1);
    PyObject *nv = PyNumber_Add(cur, one);
    Py_DECREF(one);
    if (nv == NULL) return -1;
    int r = PyDict_SetItem(stats, s_hit, nv);
    Py_DECREF(nv);
    return r;
}

static PyObject *build(PyObject *t, PyObject *const *args, PyObject **outs) {
    /* t: (0,) None; (1, i) argument i; (2, j) output j; (3, parts) a tuple; (4, parts) a list */
    long kind = PyLong_AsLong(PyTuple_GET_ITEM(t, 0));
    if (kind == 0) Py_RETURN_NONE;
    if (kind == 1 || kind == 2) {
        Py_ssize_t i = PyLong_AsSsize_t(PyTuple_GET_ITEM(t, 1));
        PyObject *r = kind == 1 ? args[i] : outs[i];
        Py_INCREF(r);
        return r;
    }
    PyObject *parts = PyTuple_GET_ITEM(t, 1);
    Py_ssize_t n = PyTuple_GET_SIZE(parts);
    PyObject *r = kind == 3 ? PyTuple_New(n) : PyList_New(n);
    if (r == NULL) return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *x = build(PyTuple_GET_ITEM(parts, i), args, outs);
        if (x == NULL) {
            Py_DECREF(r);
            return NULL;
        }
        if (kind == 3)
            PyTuple_SET_ITEM(r, i, x);
        else
            PyList_SET_ITEM(r, i, x);
    }
    return r;
}

/* The entry's replay with this call's addresses (L->addrs[0..nargs)): the result (a new reference); NULL with
   *miss set and no error when nothing was launched and the full path should run; NULL with an error set. */
static PyObject *replay(Entry *e, Layout *L, PyObject *const *args, int *miss) {
    *miss = 0;
    if (e->nlaunch) {
        void *c = NULL;
        if (g_ctx == NULL || g_ctx(&c) != 0) c = NULL;
        if (c == NULL || c != e->ctx) { /* the first call, or another context: ask which device is current */
            PyObject *d = PyObject_CallNoArgs(e->current_device);
            if (d == NULL) return NULL;
            long dev = PyLong_AsLong(d);
            Py_DECREF(d);
            if (dev == -1 && PyErr_Occurred()) return NULL;
            if (dev != e->device) {
                *miss = 1;
                return NULL;
            }
            if (c != NULL) e->ctx = c;
        }
    }
    PyObject *outs[MAX_OUTS];
    int nouts = 0;
    PyObject *result = NULL;
    for (; nouts < e->nouts; nouts++) {
        PyObject *o = PyObject_Call(e->empty, e->out_args[nouts], e->out_kw[nouts]);
        if (o == NULL) goto done;
        outs[nouts] = o;
        PyObject *p = PyObject_CallMethodNoArgs(o, s_data_ptr);
        if (p == NULL) {
            nouts++;
            goto done;
        }
        L->addrs[e->nargs + nouts] = (uintptr_t)PyLong_AsUnsignedLongLong(p);
        Py_DECREF(p);
        if (PyErr_Occurred()) {
            nouts++;
            goto done;
        }
    }
    if (e->nlaunch) {
        PyObject *s = PyObject_CallOneArg(e->stream, e->device_obj);
        if (s == NULL) goto done;
        void *handle = PyLong_AsVoidPtr(s);
        Py_DECREF(s);
        if (handle == NULL && PyErr_Occurred()) goto done;
        for (int k = 0; k < e->nlaunch; k++) {
            Launch *l = &e->launches[k];
            _Alignas(16) unsigned char buf[MAX_BLOB];
            void *params[MAX_PARAMS];
            memcpy(buf, l->blob, (size_t)l->blob_size);
            for (int p = 0; p < l->npatch; p++) {
                Patch *pt = &l->patches[p];
                uint64_t v = (uint64_t)(L->addrs[pt->src] + (uintptr_t)pt->off);
                memcpy(buf + l->offsets[pt->slot], &v, sizeof v);
            }
            /* TMA maps: each goes into this call's buffer as soon as it is known. The cache (mp->bytes, mp->ptr)
               is shared by every call of the entry, and encoding a changed map calls Python, where the GIL may
               pass to another thread replaying this entry: between the check of mp->ptr and the copy of
               mp->bytes there is no Python call, and a new encoding is copied from its own bytes object
               before the cache is updated (both without a Python call in between). */
            for (int m = 0; m < l->nmaps; m++) {
                MapPatch *mp = &l->maps[m];
                unsigned char *dst = buf + l->offsets[mp->slot];
                uintptr_t ptr = L->addrs[mp->src] + (uintptr_t)mp->off;
                if (ptr == mp->ptr) {
                    memcpy(dst, mp->bytes, TMA_BYTES);
                    continue;
                }
                PyObject *a = PyLong_FromUnsignedLongLong((unsigned long long)ptr);
                PyObject *b = a != NULL ? PyObject_CallOneArg(mp->encode, a) : NULL;
                Py_XDECREF(a);
                if (b == NULL) goto done;
                if (!PyBytes_Check(b) || PyBytes_GET_SIZE(b) != TMA_BYTES) {
                    Py_DECREF(b);
                    PyErr_SetString(PyExc_TypeError, "tilex._cfast: a TMA encoder returned no 128 bytes");
                    goto done;
                }
                memcpy(dst, PyBytes_AS_STRING(b), TMA_BYTES);
                memcpy(mp->bytes, PyBytes_AS_STRING(b), TMA_BYTES);
                mp->ptr = ptr;
                Py_DECREF(b);
            }
            for (int p = 0; p < l->nparams; p++) params[p] = buf + l->offsets[p];
            LaunchConfig cfg = {l->grid[0], l->grid[1], l->grid[2], l->block, 1, 1, l->smem, handle, NULL, 0};
            int err;
            Py_BEGIN_ALLOW_THREADS /* a full launch queue blocks here: other threads run meanwhile (the
                                      buffers are this call's stack; the entry is referenced by the caller) */
            err = g_launch(&cfg, l->function, params, NULL);
            Py_END_ALLOW_THREADS
            if (err != 0) {
                if (k == 0) { /* nothing ran: the full path launches through CuPy and says what is wrong */
                    *miss = 1;
                    goto done;
                }
                PyErr_Format(g_launch_error != NULL ? g_launch_error : PyExc_RuntimeError,
                             "%U: cuLaunchKernelEx failed (CUresult %d) after an earlier kernel of this call was "
                             "launched", e->name, err);
                goto done;
            }
        }
    }
    result = build(e->tmpl, args, outs);
done:
    for (int j = 0; j < nouts; j++) Py_DECREF(outs[j]);
    return result;
}

static PyObject *fastcall_vectorcall(PyObject *self_, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    FastCall *self = (FastCall *)self_;
    Py_ssize_t npos = PyVectorcall_NARGS(nargsf);
    Py_ssize_t n = npos + (kwnames != NULL ? PyTuple_GET_SIZE(kwnames) : 0);
    if (g_launch == NULL || PyDict_GET_SIZE(self->cmemo) == 0 || n > MAX_ARGS || !enabled(self))
        return PyObject_Vectorcall(self->slow, args, nargsf, kwnames);
    Layout L;
    PyObject *result = NULL;
    Entry *e = NULL;
    if (!read_layout(&L, args, n)) goto slow;
    PyObject *key = PyLong_FromUnsignedLongLong(layout_hash(&L, npos, kwnames));
    if (key == NULL) goto error;
    e = (Entry *)PyDict_GetItemWithError(self->cmemo, key);
    Py_DECREF(key);
    if (e == NULL) {
        if (PyErr_Occurred()) goto error;
        goto slow;
    }
    Py_INCREF(e); /* kept while Python code runs (another thread may clear the memo) */
    if (e->nargs != n || e->npos != npos || e->nsig != L.nsig || e->nobjs != L.nobjs ||
        memcmp(e->sig, L.sig, sizeof(int64_t) * (size_t)L.nsig) != 0)
        goto slow;
    if (e->kwnames != kwnames) {
        if (e->kwnames == NULL || kwnames == NULL) goto slow;
        int eq = PyObject_RichCompareBool(e->kwnames, kwnames, Py_EQ);
        if (eq != 1) {
            if (eq < 0) PyErr_Clear();
            goto slow;
        }
    }
    for (int i = 0; i < L.nobjs; i++) {
        int eq = PyObject_RichCompareBool(e->objs[i], L.objs[i], Py_EQ);
        if (eq != 1) {
            if (eq < 0) PyErr_Clear();
            goto slow;
        }
    }
    {
        int ok;
        double now = now_s(self, &ok);
        PyObject *rs = PyDict_GetItemWithError(self->globals, s_RECHECK_S);
        double recheck = rs != NULL ? PyFloat_AsDouble(rs) : 0.0;
        if (PyErr_Occurred()) {
            PyErr_Clear();
            goto slow;
        }
        if (!ok || !(now - e->born < recheck)) goto slow;
    }
    int miss;
    result = replay(e, &L, args, &miss);
    if (result == NULL) {
        if (miss) goto slow;
        goto error;
    }
    if (count_hit(self) < 0) Py_CLEAR(result);
    layout_clear(&L);
    Py_DECREF(e);
    return result;
slow:
    layout_clear(&L);
    Py_XDECREF(e);
    return PyObject_Vectorcall(self->slow, args, nargsf, kwnames);
error:
    layout_clear(&L);
    Py_XDECREF(e);
    return NULL;
}

/* FastCall.register(args, npos, kwnames, data) -> bool: make the Entry of this recorded call (see
   tilex.cfast.entry_data for `data`) and remember it under its layout. False (nothing remembered) when the C
   path cannot replay it: an argument it does not key on, or more arguments, outputs or parameters than its
   fixed buffers hold. */
static PyObject *fastcall_register(FastCall *self, PyObject *a) {
    PyObject *args, *kwnames, *data;
    Py_ssize_t npos;
    if (!PyArg_ParseTuple(a, "O!nOO!", &PyTuple_Type, &args, &npos, &kwnames, &PyTuple_Type, &data)) return NULL;
    if (kwnames == Py_None) kwnames = NULL;
    else if (!PyTuple_Check(kwnames)) {
        PyErr_SetString(PyExc_TypeError, "register: kwnames must be a tuple or None");
        return NULL;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(args);
    if (n > MAX_ARGS || npos > n || (kwnames != NULL && npos + PyTuple_GET_SIZE(kwnames) != n)) Py_RETURN_FALSE;
    double born;
    long device;
    PyObject *current_device, *stream, *empty, *allocs, *launches, *tmpl, *name;
    if (!PyArg_ParseTuple(data, "dlOOOO!O!O!U", &born, &device, &current_device, &stream, &empty, &PyTuple_Type,
                          &allocs, &PyTuple_Type, &launches, &PyTuple_Type, &tmpl, &name))
        return NULL;
    Layout L;
    if (!read_layout(&L, PySequence_Fast_ITEMS(args), n)) {
        layout_clear(&L);
        Py_RETURN_FALSE;
    }
    Py_ssize_t nouts = PyTuple_GET_SIZE(allocs), nlaunch = PyTuple_GET_SIZE(launches);
    if (nouts > MAX_OUTS) {
        layout_clear(&L);
        Py_RETURN_FALSE;
    }
    Entry *e = PyObject_New(Entry, &EntryType);
    if (e == NULL) {
        layout_clear(&L);
        return NULL;
    }
    memset((char *)e + sizeof(PyObject), 0, sizeof(Entry) - sizeof(PyObject));
    e->nsig = L.nsig;
    e->sig = PyMem_Malloc(sizeof(int64_t) * (size_t)(L.nsig ? L.nsig : 1));
    e->objs = PyMem_Malloc(sizeof(PyObject *) * (size_t)(L.nobjs ? L.nobjs : 1));
    e->out_args = PyMem_Calloc((size_t)(nouts ? nouts : 1), sizeof(PyObject *));
    e->out_kw = PyMem_Calloc((size_t)(nouts ? nouts : 1), sizeof(PyObject *));
    e->launches = PyMem_Calloc((size_t)(nlaunch ? nlaunch : 1), sizeof(Launch));
    if (!e->sig || !e->objs || !e->out_args || !e->out_kw || !e->launches) {
        layout_clear(&L);
        Py_DECREF(e);
        return PyErr_NoMemory();
    }
    memcpy(e->sig, L.sig, sizeof(int64_t) * (size_t)L.nsig);
    memcpy(e->objs, L.objs, sizeof(PyObject *) * (size_t)L.nobjs); /* the references move to the entry */
    e->nobjs = L.nobjs;
    L.nobjs = 0;
    e->nargs = n;
    e->npos = npos;
    Py_XINCREF(kwnames);
    e->kwnames = kwnames;
    e->born = born;
    e->device = device;
    e->device_obj = PyLong_FromLong(device);
    Py_INCREF(current_device);
    e->current_device = current_device;
    Py_INCREF(stream);
    e->stream = stream;
    Py_INCREF(empty);
    e->empty = empty;
    Py_INCREF(tmpl);
    e->tmpl = tmpl;
    Py_INCREF(name);
    e->name = name;
    if (e->device_obj == NULL) goto fail;
    for (Py_ssize_t j = 0; j < nouts; j++) { /* (args tuple, kwargs dict) */
        PyObject *al = PyTuple_GET_ITEM(allocs, j), *ca, *kw;
        if (!PyArg_ParseTuple(al, "O!O!", &PyTuple_Type, &ca, &PyDict_Type, &kw)) goto fail;
        Py_INCREF(ca);
        Py_INCREF(kw);
        e->out_args[j] = ca;
        e->out_kw[j] = kw;
        e->nouts = (int)j + 1;
    }
    for (Py_ssize_t k = 0; k < nlaunch; k++) {
        /* (function, (gx, gy, gz), block, smem, blob, offsets, ((slot, src, off), ...),
            ((slot, src, off, encode, ptr), ...)) */
        PyObject *lt = PyTuple_GET_ITEM(launches, k), *blob, *offsets, *patches, *maps;
        unsigned long long function;
        unsigned int gx, gy, gz, block, smem;
        if (!PyArg_ParseTuple(lt, "K(III)IIO!O!O!O!", &function, &gx, &gy, &gz, &block, &smem, &PyBytes_Type, &blob,
                              &PyTuple_Type, &offsets, &PyTuple_Type, &patches, &PyTuple_Type, &maps))
            goto fail;
        Launch *l = &e->launches[k];
        e->nlaunch = (int)k + 1;
        Py_ssize_t np_ = PyTuple_GET_SIZE(offsets), bs = PyBytes_GET_SIZE(blob);
        if (np_ > MAX_PARAMS || bs > MAX_BLOB) goto refuse;
        l->function = (void *)(uintptr_t)function;
        l->grid[0] = gx, l->grid[1] = gy, l->grid[2] = gz, l->block = block, l->smem = smem;
        l->nparams = (int)np_;
        l->blob_size = bs;
        l->blob = PyMem_Malloc((size_t)(bs ? bs : 1));
        l->offsets = PyMem_Malloc(sizeof(Py_ssize_t) * (size_t)(np_ ? np_ : 1));
        l->patches = PyMem_Calloc((size_t)(PyTuple_GET_SIZE(patches) + 1), sizeof(Patch));
        l->maps = PyMem_Calloc((size_t)(PyTuple_GET_SIZE(maps) + 1), sizeof(MapPatch));
        if (!l->blob || !l->offsets || !l->patches || !l->maps) {
            PyErr_NoMemory();
            goto fail;
        }
        memcpy(l->blob, PyBytes_AS_STRING(blob), (size_t)bs);
        for (Py_ssize_t p = 0; p < np_; p++) {
            Py_ssize_t off = PyLong_AsSsize_t(PyTuple_GET_ITEM(offsets, p));
            if (off == -1 && PyErr_Occurred()) goto fail;
            if (off < 0 || off > bs) goto refuse;
            l->offsets[p] = off;
        }
        for (Py_ssize_t p = 0; p < PyTuple_GET_SIZE(patches); p++) {
            Patch *pt = &l->patches[p];
            long long off;
            if (!PyArg_ParseTuple(PyTuple_GET_ITEM(patches, p), "iiL", &pt->slot, &pt->src, &off)) goto fail;
            pt->off = off;
            l->npatch = (int)p + 1;
            if (pt->slot < 0 || pt->slot >= np_ || l->offsets[pt->slot] + 8 > bs || pt->src < 0 ||
                pt->src >= n + nouts)
                goto refuse;
        }
        for (Py_ssize_t m = 0; m < PyTuple_GET_SIZE(maps); m++) {
            MapPatch *mp = &l->maps[m];
            long long off;
            unsigned long long ptr;
            PyObject *encode;
            if (!PyArg_ParseTuple(PyTuple_GET_ITEM(maps, m), "iiLOK", &mp->slot, &mp->src, &off, &encode, &ptr))
                goto fail;
            Py_INCREF(encode);
            mp->encode = encode;
            mp->off = off;
            mp->ptr = (uintptr_t)ptr;
            l->nmaps = (int)m + 1;
            if (mp->slot < 0 || mp->slot >= np_ || l->offsets[mp->slot] + TMA_BYTES > bs || mp->src < 0 ||
                mp->src >= n + nouts)
                goto refuse;
            memcpy(mp->bytes, l->blob + l->offsets[mp->slot], TMA_BYTES);
        }
    }
    {
        PyObject *key = PyLong_FromUnsignedLongLong(layout_hash(&L, npos, kwnames));
        if (key == NULL) goto fail;
        int r = PyDict_SetItem(self->cmemo, key, (PyObject *)e);
        Py_DECREF(key);
        if (r < 0) goto fail;
    }
    layout_clear(&L);
    Py_DECREF(e);
    Py_RETURN_TRUE;
refuse:
    layout_clear(&L);
    Py_DECREF(e);
    Py_RETURN_FALSE;
fail:
    layout_clear(&L);
    Py_DECREF(e);
    return NULL;
}

/* FastCall.lookup(*args, **kwargs) -> the Entry this call's layout would replay, or None (tests) */
static PyObject *fastcall_lookup(FastCall *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    Py_ssize_t npos = PyVectorcall_NARGS(nargsf);
    Py_ssize_t n = npos + (kwnames != NULL ? PyTuple_GET_SIZE(kwnames) : 0);
    Layout L;
    if (n > MAX_ARGS || !read_layout(&L, args, n)) {
        layout_clear(&L);
        Py_RETURN_NONE;
    }
    PyObject *key = PyLong_FromUnsignedLongLong(layout_hash(&L, npos, kwnames));
    layout_clear(&L);
    if (key == NULL) return NULL;
    PyObject *e = PyDict_GetItemWithError(self->cmemo, key);
    Py_DECREF(key);
    if (e == NULL) {
        if (PyErr_Occurred()) return NULL;
        Py_RETURN_NONE;
    }
    Py_INCREF(e);
    return e;
}

static PyObject *fastcall_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
    PyObject *slow, *globals;
    static char *names[] = {"slow", "globals", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO!", names, &slow, &PyDict_Type, &globals)) return NULL;
    if (!PyCallable_Check(slow)) {
        PyErr_SetString(PyExc_TypeError, "FastCall: slow must be callable");
        return NULL;
    }
    FastCall *self = (FastCall *)type->tp_alloc(type, 0);
    if (self == NULL) return NULL;
    self->vectorcall = fastcall_vectorcall;
    Py_INCREF(slow);
    self->slow = slow;
    Py_INCREF(globals);
    self->globals = globals;
    self->cmemo = PyDict_New();
    self->dict = PyDict_New();
    if (self->cmemo == NULL || self->dict == NULL) {
        Py_DECREF(self);
        return NULL;
    }
    return (PyObject *)self;
}

static int fastcall_traverse(FastCall *self, visitproc visit, void *arg) {
    Py_VISIT(self->slow);
    Py_VISIT(self->globals);
    Py_VISIT(self->cmemo);
    Py_VISIT(self->dict);
    return 0;
}

static int fastcall_clear(FastCall *self) {
    Py_CLEAR(self->slow);
    Py_CLEAR(self->globals);
    Py_CLEAR(self->cmemo);
    Py_CLEAR(self->dict);
    return 0;
}

static void fastcall_dealloc(FastCall *self) {
    PyObject_GC_UnTrack(self);
    fastcall_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *fastcall_descr_get(PyObject *self, PyObject *obj, PyObject *type) {
    if (obj == NULL || obj == Py_None) { /* as a function: unbound on the class */
        Py_INCREF(self);
        return self;
    }
    return PyMethod_New(self, obj);
}

static PyObject *fastcall_repr(FastCall *self) {
    PyObject *name = self->dict != NULL ? PyDict_GetItemString(self->dict, "__qualname__") : NULL;
    if (name != NULL) return PyUnicode_FromFormat("<fast-path wrapper %S>", name);
    return PyUnicode_FromString("<fast-path wrapper>");
}

static PyObject *fastcall_get_cmemo(FastCall *self, void *c) {
    Py_INCREF(self->cmemo);
    return self->cmemo;
}

static PyObject *fastcall_get_slow(FastCall *self, void *c) {
    Py_INCREF(self->slow);
    return self->slow;
}

static PyMethodDef fastcall_methods[] = {
    {"register", (PyCFunction)fastcall_register, METH_VARARGS,
     "register(args, npos, kwnames, data) -> bool: remember a recorded call's replay (see tilex.cfast)."},
    {"lookup", (PyCFunction)(void (*)(void))fastcall_lookup, METH_FASTCALL | METH_KEYWORDS,
     "lookup(*args, **kwargs) -> the Entry this call's layout would replay, or None."},
    {NULL}};

static PyGetSetDef fastcall_getset[] = {
    {"cmemo", (getter)fastcall_get_cmemo, NULL, "layout hash -> Entry (cleared with the Python memo)", NULL},
    {"slow", (getter)fastcall_get_slow, NULL, "the Python call the C path falls back to", NULL},
    {"__dict__", PyObject_GenericGetDict, PyObject_GenericSetDict, NULL, NULL},
    {NULL}};

static PyTypeObject FastCallType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "tilex._cfast.FastCall",
    .tp_basicsize = sizeof(FastCall),
    .tp_dealloc = (destructor)fastcall_dealloc,
    .tp_vectorcall_offset = offsetof(FastCall, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_repr = (reprfunc)fastcall_repr,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "FastCall(slow, globals): a library wrapper whose memoized layouts replay in C (tilex.cfast).",
    .tp_traverse = (traverseproc)fastcall_traverse,
    .tp_clear = (inquiry)fastcall_clear,
    .tp_methods = fastcall_methods,
    .tp_getset = fastcall_getset,
    .tp_descr_get = fastcall_descr_get,
    .tp_dictoffset = offsetof(FastCall, dict),
    .tp_new = fastcall_new,
};

/* ------------------------------------------------------------------ Launcher: driver.launcher()'s call in C */

/* Launcher(path): cuLaunchKernelEx of the driver library `path` (dlopen), called as tilex.runtime.driver's ctypes
   function is: launcher(config, f, kernelParams, extra) with config a ctypes pointer to a LaunchConfig, f a
   ctypes.c_void_p (or an int), kernelParams a ctypes array of void* and extra None; returns the CUresult. Unlike
   the ctypes call it converts nothing and keeps the GIL (a launch is a few microseconds of driver time). */
typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    launch_fn fn;
    void *lib;
} Launcher;

static int ctypes_value(PyObject *o, void **out) { /* the pointer a ctypes pointer or c_void_p holds */
    if (PyLong_Check(o)) {
        *out = PyLong_AsVoidPtr(o);
        return PyErr_Occurred() ? -1 : 0;
    }
    if (o == Py_None) {
        *out = NULL;
        return 0;
    }
    Py_buffer v;
    if (PyObject_GetBuffer(o, &v, PyBUF_SIMPLE) < 0) return -1;
    int ok = v.len == (Py_ssize_t)sizeof(void *);
    if (ok) memcpy(out, v.buf, sizeof(void *));
    PyBuffer_Release(&v);
    if (!ok) PyErr_SetString(PyExc_TypeError, "Launcher: expected a ctypes pointer, c_void_p or int");
    return ok ? 0 : -1;
}

static int ctypes_address(PyObject *o, void **out) { /* the address of a ctypes object's storage */
    Py_buffer v;
    if (PyObject_GetBuffer(o, &v, PyBUF_SIMPLE) < 0) return -1;
    *out = v.buf;
    PyBuffer_Release(&v);
    return 0;
}

static PyObject *launcher_vectorcall(PyObject *self_, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    Launcher *self = (Launcher *)self_;
    if (PyVectorcall_NARGS(nargsf) != 4 || kwnames != NULL) {
        PyErr_SetString(PyExc_TypeError, "Launcher(config, f, kernelParams, extra) takes 4 positional arguments");
        return NULL;
    }
    void *cfg, *f, *params;
    if (ctypes_value(args[0], &cfg) < 0 || ctypes_value(args[1], &f) < 0 || ctypes_address(args[2], &params) < 0)
        return NULL;
    if (args[3] != Py_None) {
        PyErr_SetString(PyExc_TypeError, "Launcher: extra must be None");
        return NULL;
    }
    int err;
    Py_BEGIN_ALLOW_THREADS /* the caller's ctypes objects hold config and parameters alive */
    err = self->fn((const LaunchConfig *)cfg, f, (void **)params, NULL);
    Py_END_ALLOW_THREADS
    return PyLong_FromLong(err);
}

static PyObject *launcher_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
    const char *path;
    if (!PyArg_ParseTuple(args, "s", &path)) return NULL;
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL) {
        PyErr_Format(PyExc_OSError, "Launcher: cannot open %s: %s", path, dlerror());
        return NULL;
    }
    void *fn = dlsym(lib, "cuLaunchKernelEx");
    if (fn == NULL) {
        dlclose(lib);
        PyErr_Format(PyExc_AttributeError, "Launcher: %s has no cuLaunchKernelEx", path);
        return NULL;
    }
    Launcher *self = (Launcher *)type->tp_alloc(type, 0);
    if (self == NULL) {
        dlclose(lib);
        return NULL;
    }
    self->vectorcall = launcher_vectorcall;
    self->fn = (launch_fn)fn;
    self->lib = lib; /* never closed: plans hold its functions' handles */
    return (PyObject *)self;
}

static PyTypeObject LauncherType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "tilex._cfast.Launcher",
    .tp_basicsize = sizeof(Launcher),
    .tp_vectorcall_offset = offsetof(Launcher, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "Launcher(path): cuLaunchKernelEx of that driver library, called as driver.launcher()'s function.",
    .tp_new = launcher_new,
};

/* ------------------------------------------------------------------ module functions */

static PyObject *mod_load_driver(PyObject *m, PyObject *arg) {
    if (!PyUnicode_Check(arg)) {
        PyErr_SetString(PyExc_TypeError, "load_driver: expected the library's file name");
        return NULL;
    }
    if (g_launch != NULL) Py_RETURN_TRUE;
    const char *path = PyUnicode_AsUTF8(arg);
    if (path == NULL) return NULL;
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL) Py_RETURN_FALSE;
    void *launch = dlsym(lib, "cuLaunchKernelEx"), *ctx = dlsym(lib, "cuCtxGetCurrent");
    if (launch == NULL || ctx == NULL) {
        dlclose(lib);
        Py_RETURN_FALSE;
    }
    g_lib = lib;
    g_launch = (launch_fn)launch;
    g_ctx = (ctx_fn)ctx;
    Py_RETURN_TRUE;
}

static PyObject *mod_set_driver(PyObject *m, PyObject *args) {
    unsigned long long launch, ctx;
    if (!PyArg_ParseTuple(args, "KK", &launch, &ctx)) return NULL;
    g_launch = (launch_fn)(uintptr_t)launch;
    g_ctx = (ctx_fn)(uintptr_t)ctx;
    Py_RETURN_NONE;
}

static int noop_launch(const LaunchConfig *c, void *f, void **p, void **e) { return 0; }
static int noop_ctx(void **c) {
    *c = (void *)&noop_ctx;
    return 0;
}

static PyObject *mod_get_driver(PyObject *m, PyObject *unused) {
    return Py_BuildValue("KK", (unsigned long long)(uintptr_t)g_launch, (unsigned long long)(uintptr_t)g_ctx);
}

static PyObject *mod_noop_driver(PyObject *m, PyObject *unused) {
    return Py_BuildValue("KK", (unsigned long long)(uintptr_t)&noop_launch, (unsigned long long)(uintptr_t)&noop_ctx);
}

static PyObject *mod_driver_loaded(PyObject *m, PyObject *unused) { return PyBool_FromLong(g_launch != NULL); }

static PyObject *mod_configure(PyObject *m, PyObject *args) {
    PyObject *err, *types;
    if (!PyArg_ParseTuple(args, "OO!", &err, &PySet_Type, &types)) return NULL;
    Py_INCREF(err);
    Py_XSETREF(g_launch_error, err);
    Py_INCREF(types);
    Py_XSETREF(g_tensor_types, types);
    Py_RETURN_NONE;
}

static PyObject *mod_hits(PyObject *m, PyObject *unused) { return PyLong_FromUnsignedLongLong(g_hits); }

static PyMethodDef mod_methods[] = {
    {"load_driver", mod_load_driver, METH_O,
     "load_driver(path) -> bool: dlopen the CUDA driver (once) and find cuLaunchKernelEx and cuCtxGetCurrent."},
    {"set_driver", mod_set_driver, METH_VARARGS,
     "set_driver(launch, ctx_get_current): the two driver functions' addresses (tests: stand-ins; 0, 0: none)."},
    {"get_driver", mod_get_driver, METH_NOARGS, "get_driver() -> (launch, ctx_get_current) addresses now set"},
    {"noop_driver", mod_noop_driver, METH_NOARGS,
     "noop_driver() -> addresses of a launch that does nothing and returns 0, and a constant context (benchmarks: "
     "the C path's own cost)"},
    {"driver_loaded", mod_driver_loaded, METH_NOARGS, "whether a driver is set"},
    {"configure", mod_configure, METH_VARARGS,
     "configure(LaunchError, tensor_types): the error class for a failed later launch, the set of tensor types."},
    {"hits", mod_hits, METH_NOARGS, "C-path hits in this process"},
    {NULL}};

static struct PyModuleDef moddef = {PyModuleDef_HEAD_INIT, "_cfast", "The stdlib fast path's replay in C.", -1,
                                    mod_methods};

#define INTERN(var, s)                                   \
    do {                                                 \
        var = PyUnicode_InternFromString(s);             \
        if (var == NULL) return NULL;                    \
    } while (0)

PyMODINIT_FUNC PyInit__cfast(void) {
    if (PyType_Ready(&EntryType) < 0 || PyType_Ready(&FastCallType) < 0 || PyType_Ready(&LauncherType) < 0)
        return NULL;
    INTERN(s_FASTPATH, "FASTPATH");
    INTERN(s_POISON, "POISON");
    INTERN(s_CFAST, "CFAST");
    INTERN(s_TLS, "_TLS");
    INTERN(s_OUTPUT, "OUTPUT");
    INTERN(s_rec, "rec");
    INTERN(s_fn, "fn");
    INTERN(s_RECHECK_S, "RECHECK_S");
    INTERN(s_STATS, "STATS");
    INTERN(s_hit, "hit");
    INTERN(s_monotonic, "_monotonic");
    INTERN(s_data_ptr, "data_ptr");
    INTERN(s_shape, "shape");
    INTERN(s_stride, "stride");
    INTERN(s_dtype, "dtype");
    INTERN(s_device, "device");
    INTERN(s_DRIVER, "_DRIVER");
    INTERN(s_CFAST_LAUNCHER, "_CFAST_LAUNCHER");
    INTERN(s_launcher, "launcher");
    PyObject *time = PyImport_ImportModule("time");
    if (time == NULL) return NULL;
    g_monotonic = PyObject_GetAttrString(time, "monotonic");
    Py_DECREF(time);
    if (g_monotonic == NULL) return NULL;
    PyObject *m = PyModule_Create(&moddef);
    if (m == NULL) return NULL;
    if (PyModule_AddStringConstant(m, "SOURCE_SHA", TILEX_CFAST_SHA) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    Py_INCREF(&FastCallType);
    Py_INCREF(&EntryType);
    Py_INCREF(&LauncherType);
    if (PyModule_AddObject(m, "FastCall", (PyObject *)&FastCallType) < 0 ||
        PyModule_AddObject(m, "Entry", (PyObject *)&EntryType) < 0 ||
        PyModule_AddObject(m, "Launcher", (PyObject *)&LauncherType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
