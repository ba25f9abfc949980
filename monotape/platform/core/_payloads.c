/* _payloads: one frame's FRAME payloads, one per subscription signature, built in C
   (core/payloads.py documents the function; python_frame_payloads is its pure-Python twin).

   frame_payloads(frame_no, chunks, groups_of) -> dict[signature, bytes]
   bind(fallback)                                (payloads.py calls it once, at import)

   chunks maps an iid to its encoded record; groups_of maps an iid to the set of signatures
   holding it (the index's own sets). For every signature holding at least one iid of chunks,
   the result is the RFC 6455 server frame of FRAME(frame_no, its chunks in ascending iid),
   in the order in which the walk over ascending iids first meets the signature.

   Why native: at 4,200 terminals (266 signatures, ~530 changed symbols watched, ~1,600 chunk
   placements a frame) the Python planning (plan_payloads, then a header, a join and a frame
   per signature) took ~1 ms of every 40 ms frame on this machine, the largest part of the
   writer's cost above its send loop (bench_fanout, docs/benchmarks.md). Here it is two passes
   and one allocation per payload: the first finds each signature's count and length, the
   second copies every chunk straight into its payloads.

   What it covers: an int frame_no in 0 .. 2**64-1, exact dicts for chunks and groups_of with
   int keys, exact bytes chunks, exact set or frozenset groups of int signatures, positional
   arguments. No Python code runs while it plans, so anything else goes, untouched, to the
   bound fallback (the twin), which gives the same result or the same exception. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define KIND_FRAME 3 /* docs/wire.md: Kind.FRAME */
#define UVARINT_MAX 10

static PyObject *fallback = NULL;

static size_t
put_uvarint(unsigned char *out, uint64_t v)
{
    size_t n = 0;
    while (v >= 0x80) {
        out[n++] = (unsigned char)(v | 0x80);
        v >>= 7;
    }
    out[n++] = (unsigned char)v;
    return n;
}

/* Per signature met: the signature (a strong reference) and its hash, its chunk count and
   bytes. */
typedef struct {
    PyObject *sig;
    Py_hash_t hash;
    uint64_t count;
    size_t size;
    char *at; /* pass two: where its next chunk goes */
} Group;

/* One placement: chunk (a strong reference) into group. */
typedef struct {
    PyObject *chunk;
    Py_ssize_t group;
} Placement;

/* The groups in the order met, found by signature through an open-addressing table of group
   indexes + 1 (0: empty) over the hash the set already keeps: one probe a placement, where a
   dict of signature -> index cost a lookup and an int conversion (~35 us a frame here). */
typedef struct {
    Group *groups;
    Py_ssize_t n_groups, cap_groups;
    Py_ssize_t *table;
    size_t mask; /* table size - 1, a power of two at least twice n_groups */
    Placement *placed;
    Py_ssize_t n_placed, cap_placed;
} Plan;

static void
plan_free(Plan *plan)
{
    for (Py_ssize_t i = 0; i < plan->n_groups; i++) {
        Py_DECREF(plan->groups[i].sig);
    }
    for (Py_ssize_t i = 0; i < plan->n_placed; i++) {
        Py_DECREF(plan->placed[i].chunk);
    }
    PyMem_Free(plan->groups);
    PyMem_Free(plan->table);
    PyMem_Free(plan->placed);
}

/* Doubles *cap (from 16) so that *n + 1 items of size fit; 0, or -1 with MemoryError. */
static int
grow(void **items, Py_ssize_t n, Py_ssize_t *cap, size_t size)
{
    if (n < *cap) {
        return 0;
    }
    Py_ssize_t want = *cap ? *cap * 2 : 16;
    void *more = PyMem_Realloc(*items, (size_t)want * size);
    if (more == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    *items = more;
    *cap = want;
    return 0;
}

/* A table of size entries holding every group; 0, or -1 with MemoryError. */
static int
rehash(Plan *plan, size_t size)
{
    Py_ssize_t *table = PyMem_Calloc(size, sizeof(Py_ssize_t));
    if (table == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    size_t mask = size - 1;
    for (Py_ssize_t g = 0; g < plan->n_groups; g++) {
        size_t i = (size_t)plan->groups[g].hash & mask;
        while (table[i] != 0) {
            i = (i + 1) & mask;
        }
        table[i] = g + 1;
    }
    PyMem_Free(plan->table);
    plan->table = table;
    plan->mask = mask;
    return 0;
}

/* The index of sig's group, a new one if it has none; -1 with an exception set. */
static Py_ssize_t
group_of(Plan *plan, PyObject *sig, Py_hash_t hash)
{
    if (plan->table == NULL && rehash(plan, 64) < 0) {
        return -1;
    }
    size_t i = (size_t)hash & plan->mask;
    for (; plan->table[i] != 0; i = (i + 1) & plan->mask) {
        Group *group = &plan->groups[plan->table[i] - 1];
        if (group->sig == sig) {
            return plan->table[i] - 1;
        }
        if (group->hash == hash) {
            int same = PyObject_RichCompareBool(group->sig, sig, Py_EQ); /* two ints: C only */
            if (same < 0) {
                return -1;
            }
            if (same) {
                return plan->table[i] - 1;
            }
        }
    }
    if (grow((void **)&plan->groups, plan->n_groups, &plan->cap_groups, sizeof(Group)) < 0) {
        return -1;
    }
    Py_ssize_t g = plan->n_groups++;
    Py_INCREF(sig);
    plan->groups[g] = (Group){sig, hash, 0, 0, NULL};
    plan->table[i] = g + 1;
    if ((size_t)plan->n_groups * 2 > plan->mask && rehash(plan, (plan->mask + 1) * 2) < 0) {
        return -1;
    }
    return g;
}

/* 1: placed; 0: not for us (call the fallback); -1: an exception is set. */
static int
place(Plan *plan, PyObject *sig, Py_hash_t hash, PyObject *chunk)
{
    if (!PyLong_CheckExact(sig)) {
        return 0; /* its equality could run Python code mid-plan */
    }
    Py_ssize_t g = group_of(plan, sig, hash);
    if (g < 0) {
        return -1;
    }
    size_t size = (size_t)PyBytes_GET_SIZE(chunk);
    Group *group = &plan->groups[g];
    if (group->size > (size_t)PY_SSIZE_T_MAX - size) {
        PyErr_SetString(PyExc_OverflowError, "frame_payloads: a payload too large");
        return -1;
    }
    if (grow((void **)&plan->placed, plan->n_placed, &plan->cap_placed, sizeof(Placement)) < 0) {
        return -1;
    }
    group->count++;
    group->size += size;
    Py_INCREF(chunk);
    plan->placed[plan->n_placed++] = (Placement){chunk, g};
    return 1;
}

/* 1 if every key of dict is an exact int (and, with bytes_values, every value exact bytes). */
static int
int_keyed(PyObject *dict, int bytes_values)
{
    Py_ssize_t pos = 0;
    PyObject *key, *value;
    while (PyDict_Next(dict, &pos, &key, &value)) {
        if (!PyLong_CheckExact(key) || (bytes_values && !PyBytes_CheckExact(value))) {
            return 0;
        }
    }
    return 1;
}

/* The next (signature, hash) of a set of signatures: 1, or 0 at its end (no exception).
   Before 3.13 the set's own entries with their cached hashes; from 3.13 on, where
   _PySet_NextEntry left the public API, an iterator over it (a set iterator runs no Python
   code) and the hash of an exact int (its value, computed in C; anything else is placed by
   nobody: place() refuses it before the hash would be used). PAYLOADS_SET_ITERATOR builds the
   3.13 path on an older Python too, so `make native-sanitize` runs both. */
#if PY_VERSION_HEX >= 0x030D0000 || defined(PAYLOADS_SET_ITERATOR)
#define SET_WALK_ITERATOR 1
#endif

typedef struct {
#ifdef SET_WALK_ITERATOR
    PyObject *it;
#else
    PyObject *set;
    Py_ssize_t pos;
#endif
} SetWalk;

static int
set_walk_start(SetWalk *walk, PyObject *set)
{
#ifdef SET_WALK_ITERATOR
    /* the iterator is a tracked allocation: held across it, the set outlives any collection
       it starts (on 3.11, where this path is only the sanitizer's build) */
    Py_INCREF(set);
    walk->it = PyObject_GetIter(set);
    Py_DECREF(set);
    return walk->it == NULL ? -1 : 0;
#else
    walk->set = set;
    walk->pos = 0;
    return 0;
#endif
}

static int
set_walk_next(SetWalk *walk, PyObject **sig, Py_hash_t *hash)
{
#ifdef SET_WALK_ITERATOR
    PyObject *item = PyIter_Next(walk->it); /* new reference; the set still holds it */
    if (item == NULL) {
        return 0;
    }
    Py_DECREF(item);
    *sig = item;
    *hash = PyLong_CheckExact(item) ? PyObject_Hash(item) : -1;
    return 1;
#else
    return _PySet_NextEntry(walk->set, &walk->pos, sig, hash);
#endif
}

static void
set_walk_end(SetWalk *walk)
{
#ifdef SET_WALK_ITERATOR
    Py_CLEAR(walk->it);
#else
    (void)walk;
#endif
}

/* Pass one over ascending iids: 1 planned; 0 not for us; -1 an exception is set.

   The keys are listed first, then both dicts are checked to hold only int keys (the index's
   own ~2,400 keys: a few us) and chunks only bytes values, so the sort and every lookup
   compare ints in C: no Python code runs in the whole pass (a key's __eq__ or __lt__ could
   otherwise free a borrowed set, or change what the fallback then reads), and a fallback
   always starts from the caller's untouched input. The list comes first because building it
   allocates a tracked object, and on 3.11 that can start a collection whose finalizers or
   gc.callbacks run Python code: after the checks nothing in the pass allocates one (the
   plan's arrays are C memory), and each chunk is still checked to be bytes where it is read. */
static int
plan_groups(Plan *plan, PyObject *chunks, PyObject *groups_of)
{
    PyObject *iids = PyDict_Keys(chunks);
    if (iids == NULL) {
        return -1;
    }
    int rc = 0;
    if (!int_keyed(chunks, 1) || !int_keyed(groups_of, 0)) {
        goto done;
    }
    rc = -1;
    if (PyList_Sort(iids) < 0) {
        goto done;
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(iids); i++) {
        PyObject *iid = PyList_GET_ITEM(iids, i);
        PyObject *sigs = PyDict_GetItemWithError(groups_of, iid);
        if (sigs == NULL) {
            if (PyErr_Occurred()) {
                goto done;
            }
            continue; /* nobody holds it */
        }
        if (!PyAnySet_CheckExact(sigs)) {
            rc = 0;
            goto done;
        }
        if (PySet_GET_SIZE(sigs) == 0) {
            continue;
        }
        SetWalk walk;
        if (set_walk_start(&walk, sigs) < 0) {
            goto done;
        }
        /* read after the walk started (which may allocate): nothing from here to place()
           allocates a tracked object, so the borrowed chunk stays the dict's */
        PyObject *chunk = PyDict_GetItemWithError(chunks, iid);
        if (chunk == NULL || !PyBytes_CheckExact(chunk)) {
            /* gone or changed since the check: the dict was edited under us, by no code of
               this pass; the twin reads it as it is now */
            set_walk_end(&walk);
            rc = PyErr_Occurred() ? -1 : 0;
            goto done;
        }
        PyObject *sig;
        Py_hash_t hash;
        int placed = 1;
        while (placed > 0 && set_walk_next(&walk, &sig, &hash)) {
            placed = place(plan, sig, hash, chunk);
        }
        set_walk_end(&walk);
        if (placed <= 0) {
            rc = placed;
            goto done;
        }
        if (PyErr_Occurred()) { /* the iterator's own failure */
            goto done;
        }
    }
    rc = 1;
done:
    Py_DECREF(iids);
    return rc;
}

/* Pass two: every group's payload, headers written, then every chunk copied into place. */
static PyObject *
build(Plan *plan, uint64_t frame_no)
{
    PyObject *out = PyDict_New();
    if (out == NULL) {
        return NULL;
    }
    unsigned char frame_varint[UVARINT_MAX];
    size_t frame_len = put_uvarint(frame_varint, frame_no);
    for (Py_ssize_t g = 0; g < plan->n_groups; g++) {
        Group *group = &plan->groups[g];
        unsigned char count_varint[UVARINT_MAX];
        size_t count_len = put_uvarint(count_varint, group->count);
        size_t head = 1 + frame_len + count_len;
        if (group->size > (size_t)PY_SSIZE_T_MAX - head - 10) {
            PyErr_SetString(PyExc_OverflowError, "frame_payloads: a payload too large");
            Py_DECREF(out);
            return NULL;
        }
        size_t n = head + group->size;
        size_t ws = n < 126 ? 2 : n < 0x10000 ? 4 : 10;
        PyObject *payload = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(ws + n));
        if (payload == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        unsigned char *p = (unsigned char *)PyBytes_AS_STRING(payload);
        /* RFC 6455 section 5.2: FIN + binary, unmasked, the length in 7, 16 or 64 bits */
        *p++ = 0x82;
        if (ws == 2) {
            *p++ = (unsigned char)n;
        } else if (ws == 4) {
            *p++ = 126;
            *p++ = (unsigned char)(n >> 8);
            *p++ = (unsigned char)n;
        } else {
            *p++ = 127;
            for (int shift = 56; shift >= 0; shift -= 8) {
                *p++ = (unsigned char)((uint64_t)n >> shift);
            }
        }
        *p++ = KIND_FRAME;
        memcpy(p, frame_varint, frame_len);
        p += frame_len;
        memcpy(p, count_varint, count_len);
        p += count_len;
        group->at = (char *)p;
        int rc = PyDict_SetItem(out, group->sig, payload);
        Py_DECREF(payload); /* out holds it */
        if (rc < 0) {
            Py_DECREF(out);
            return NULL;
        }
    }
    for (Py_ssize_t i = 0; i < plan->n_placed; i++) {
        Placement *placed = &plan->placed[i];
        Group *group = &plan->groups[placed->group];
        Py_ssize_t size = PyBytes_GET_SIZE(placed->chunk);
        memcpy(group->at, PyBytes_AS_STRING(placed->chunk), (size_t)size);
        group->at += size;
    }
    return out;
}

static PyObject *
call_fallback(PyObject *const *args)
{
    if (fallback == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "frame_payloads: bind() was not called");
        return NULL;
    }
    return PyObject_Vectorcall(fallback, args, 3, NULL);
}

static PyObject *
frame_payloads(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3) {
        PyErr_Format(PyExc_TypeError, "frame_payloads() takes 3 arguments (%zd given)", nargs);
        return NULL;
    }
    if (!PyLong_CheckExact(args[0]) || !PyDict_CheckExact(args[1]) ||
        !PyDict_CheckExact(args[2])) {
        return call_fallback(args);
    }
    uint64_t frame_no = PyLong_AsUnsignedLongLong(args[0]);
    if (frame_no == (uint64_t)-1 && PyErr_Occurred()) {
        PyErr_Clear(); /* negative or past uint64: the fallback names it */
        return call_fallback(args);
    }
    Plan plan = {0};
    int planned = plan_groups(&plan, args[1], args[2]);
    PyObject *out = NULL;
    if (planned > 0) {
        out = build(&plan, frame_no);
    }
    plan_free(&plan);
    if (planned == 0) {
        return call_fallback(args);
    }
    return out;
}

static PyObject *
bind(PyObject *Py_UNUSED(module), PyObject *fn)
{
    if (!PyCallable_Check(fn)) {
        PyErr_SetString(PyExc_TypeError, "bind: the fallback must be callable");
        return NULL;
    }
    Py_INCREF(fn);
    Py_XSETREF(fallback, fn);
    Py_RETURN_NONE;
}

static PyMethodDef payloads_methods[] = {
    {"frame_payloads", (PyCFunction)(void (*)(void))frame_payloads, METH_FASTCALL,
     "frame_payloads(frame_no, chunks, groups_of) -> dict: one framed FRAME per signature."},
    {"bind", (PyCFunction)bind, METH_O,
     "bind(fallback): the pure-Python frame_payloads, for what the native one does not cover."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef payloads_module = {
    PyModuleDef_HEAD_INIT, "_payloads", "One frame's payloads per signature in C.", 0,
    payloads_methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__payloads(void)
{
    PyObject *module = PyModule_Create(&payloads_module);
    if (module == NULL) {
        return NULL;
    }
    /* make native-sanitize checks it loaded the instrumented build, not the installed one */
#if defined(__SANITIZE_ADDRESS__)
    PyObject *sanitized = Py_True;
#else
    PyObject *sanitized = Py_False;
#endif
    if (PyModule_AddObjectRef(module, "SANITIZED", sanitized) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
