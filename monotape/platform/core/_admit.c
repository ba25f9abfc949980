/* The admit rule over a whole batch's columns (issue 35: ticks travel as columns).

   admit_run(epoch, seq, iid, held_epoch, held_seq, verdict, seen) -> (applied, duplicates,
   regressions)

   One batch is one handler's ticks of one venue at one ``epoch``; ``seq`` (uint64[n]) and
   ``iid`` (uint16[n]) are its columns. ``held_epoch`` (int64[space], -1: nothing held) and
   ``held_seq`` (uint64[space]) are the caller's per-instrument versions, updated in place:
   tick i is applied iff (epoch, seq[i]) > (held_epoch, held_seq) of its instrument at that
   point of the batch, in batch order, exactly as the per-tick rule (core/admit.py) applies one
   tick after the other. ``verdict`` (uint8[n]) gets per tick: 0 applied and the latest applied
   of its instrument in this batch, 1 applied but superseded later in the batch, 2 duplicate
   (the same version again), 3 regression (older). ``seen`` (uint8[space], all zero) is scratch
   for the superseded pass and is left all zero.

   Why in C: the sequencer admits every tick of both twins (2 x 120k ticks/s, 2 x 190k at a
   spike) and the feed handler runs the same rule to count its own stream going backwards; a
   Python loop over the columns costs ~0.5 us a tick, this ~5 ns (bench_ingest). Every iid is
   checked against ``space`` before anything is written, so a bad column raises and changes
   nothing. The pure-Python twin is monotape.platform.core.admit_batch.python_admit_run.
*/
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define APPLIED 0
#define SUPERSEDED 1
#define DUPLICATE 2
#define REGRESSION 3

static int
check(Py_buffer *b, Py_ssize_t items, Py_ssize_t itemsize, const char *what)
{
    if (b->len != items * itemsize) {
        PyErr_Format(PyExc_ValueError, "admit_run: %s holds %zd bytes, want %zd", what, b->len,
                     items * itemsize);
        return -1;
    }
    return 0;
}

static PyObject *
admit_run(PyObject *Py_UNUSED(module), PyObject *args)
{
    unsigned long long epoch_arg;
    Py_buffer seq = {0}, iid = {0}, held_epoch = {0}, held_seq = {0}, verdict = {0}, seen = {0};
    PyObject *result = NULL;
    if (!PyArg_ParseTuple(args, "Ky*y*w*w*w*w*", &epoch_arg, &seq, &iid, &held_epoch, &held_seq,
                          &verdict, &seen)) {
        return NULL;
    }
    if (epoch_arg > (unsigned long long)INT64_MAX) {
        PyErr_SetString(PyExc_OverflowError, "admit_run: epoch beyond int64");
        goto done;
    }
    Py_ssize_t n = iid.len / 2;
    Py_ssize_t space = seen.len;
    if (check(&iid, n, 2, "iid") < 0 || check(&seq, n, 8, "seq") < 0 ||
        check(&verdict, n, 1, "verdict") < 0 || check(&held_epoch, space, 8, "held_epoch") < 0 ||
        check(&held_seq, space, 8, "held_seq") < 0) {
        goto done;
    }
    const uint8_t *iids = (const uint8_t *)iid.buf;
    const uint8_t *seqs = (const uint8_t *)seq.buf;
    uint8_t *he = (uint8_t *)held_epoch.buf;
    uint8_t *hs = (uint8_t *)held_seq.buf;
    uint8_t *out = (uint8_t *)verdict.buf;
    uint8_t *mark = (uint8_t *)seen.buf;
    for (Py_ssize_t i = 0; i < n; i++) { /* nothing is written before every id is known good */
        uint16_t k;
        memcpy(&k, iids + 2 * i, 2);
        if ((Py_ssize_t)k >= space) {
            PyErr_Format(PyExc_IndexError, "admit_run: iid %u at %zd is outside %zd", (unsigned)k,
                         i, space);
            goto done;
        }
    }
    int64_t epoch = (int64_t)epoch_arg;
    Py_ssize_t applied = 0, duplicates = 0, regressions = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        uint16_t k;
        uint64_t s, cs;
        int64_t ce;
        memcpy(&k, iids + 2 * i, 2);
        memcpy(&s, seqs + 8 * i, 8);
        memcpy(&ce, he + 8 * (Py_ssize_t)k, 8);
        memcpy(&cs, hs + 8 * (Py_ssize_t)k, 8);
        if (epoch > ce || (epoch == ce && s > cs)) {
            memcpy(he + 8 * (Py_ssize_t)k, &epoch, 8);
            memcpy(hs + 8 * (Py_ssize_t)k, &s, 8);
            out[i] = APPLIED;
            applied++;
        }
        else if (epoch == ce && s == cs) {
            out[i] = DUPLICATE;
            duplicates++;
        }
        else {
            out[i] = REGRESSION;
            regressions++;
        }
    }
    /* From the end: the first applied tick of an instrument met is its latest; the rest are
       superseded within the batch (the conflation keeps only the latest). */
    for (Py_ssize_t i = n - 1; i >= 0; i--) {
        if (out[i] != APPLIED) {
            continue;
        }
        uint16_t k;
        memcpy(&k, iids + 2 * i, 2);
        if (mark[k]) {
            out[i] = SUPERSEDED;
        }
        else {
            mark[k] = 1;
        }
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (out[i] == APPLIED) {
            uint16_t k;
            memcpy(&k, iids + 2 * i, 2);
            mark[k] = 0;
        }
    }
    result = Py_BuildValue("(nnn)", applied, duplicates, regressions);
done:
    PyBuffer_Release(&seq);
    PyBuffer_Release(&iid);
    PyBuffer_Release(&held_epoch);
    PyBuffer_Release(&held_seq);
    PyBuffer_Release(&verdict);
    PyBuffer_Release(&seen);
    return result;
}

/* admit_into(epoch, venue, handler, now, columns, state) -> (applied, duplicates, regressions)

   The sequencer's whole admit of one batch: ``admit_run``'s rule, and each applied tick's
   values written into its instrument's row of the lanes' state at once (a later applied tick of
   the same instrument overwrites it: the latest wins, as the conflation wants), its dirty flag
   set. ``columns`` is the batch's (seq, iid, bid, ask, last, size, venue_ts, recv_ts) and
   ``verdict``; ``state`` is (held_epoch, held_seq, bid, ask, last, size, venue_ts, decoded,
   admitted, venue, handler, dirty), each an array of ``space`` rows (int64 or uint64; the
   codes uint16; dirty uint8). ``verdict`` gets 0 applied, 2 duplicate, 3 regression (no
   superseded pass: the state needs none). Every iid is checked first; nothing is written for a
   batch that holds one outside the table. Why in C: the numpy form of this (a gather and a
   scatter per column) was ~45 us of fixed cost per batch, more than its ticks at the ~20 ticks
   a handler drains per venue each millisecond (issue 35). */
#define IN_COLS 8
#define STATE_COLS 12
static PyObject *
admit_into(PyObject *Py_UNUSED(module), PyObject *args)
{
    unsigned long long epoch_arg;
    unsigned int venue_code, handler_code;
    long long now;
    PyObject *cols_obj, *state_obj;
    if (!PyArg_ParseTuple(args, "KIILO!O!", &epoch_arg, &venue_code, &handler_code, &now,
                          &PyTuple_Type, &cols_obj, &PyTuple_Type, &state_obj)) {
        return NULL;
    }
    if (PyTuple_GET_SIZE(cols_obj) != IN_COLS + 1 || PyTuple_GET_SIZE(state_obj) != STATE_COLS) {
        PyErr_SetString(PyExc_TypeError, "admit_into: 9 columns (verdict last), 12 state arrays");
        return NULL;
    }
    if (epoch_arg > (unsigned long long)INT64_MAX || venue_code > 0xFFFF || handler_code > 0xFFFF) {
        PyErr_SetString(PyExc_OverflowError, "admit_into: epoch beyond int64 or a code beyond u16");
        return NULL;
    }
    Py_buffer in[IN_COLS + 1];
    Py_buffer st[STATE_COLS];
    int got_in = 0, got_st = 0;
    PyObject *result = NULL;
    for (; got_in < IN_COLS + 1; got_in++) {
        int flags = got_in == IN_COLS ? PyBUF_WRITABLE : PyBUF_SIMPLE;
        if (PyObject_GetBuffer(PyTuple_GET_ITEM(cols_obj, got_in), &in[got_in], flags) < 0) {
            goto done;
        }
    }
    for (; got_st < STATE_COLS; got_st++) {
        if (PyObject_GetBuffer(PyTuple_GET_ITEM(state_obj, got_st), &st[got_st],
                               PyBUF_WRITABLE) < 0) {
            goto done;
        }
    }
    /* columns: seq(8) iid(2) bid ask last size venue_ts recv_ts (8 each), verdict(1) */
    Py_ssize_t n = in[1].len / 2;
    static const Py_ssize_t in_size[IN_COLS + 1] = {8, 2, 8, 8, 8, 8, 8, 8, 1};
    for (int c = 0; c < IN_COLS + 1; c++) {
        if (in[c].len != n * in_size[c]) {
            PyErr_SetString(PyExc_ValueError, "admit_into: the columns disagree in length");
            goto done;
        }
    }
    /* state: held_epoch held_seq bid ask last size venue_ts decoded admitted (8 each),
       venue handler (2 each), dirty (1) */
    Py_ssize_t space = st[11].len;
    static const Py_ssize_t st_size[STATE_COLS] = {8, 8, 8, 8, 8, 8, 8, 8, 8, 2, 2, 1};
    for (int c = 0; c < STATE_COLS; c++) {
        if (st[c].len != space * st_size[c]) {
            PyErr_SetString(PyExc_ValueError, "admit_into: the state arrays disagree in length");
            goto done;
        }
    }
    const uint8_t *iids = (const uint8_t *)in[1].buf;
    for (Py_ssize_t i = 0; i < n; i++) {
        uint16_t k;
        memcpy(&k, iids + 2 * i, 2);
        if ((Py_ssize_t)k >= space) {
            PyErr_Format(PyExc_IndexError, "admit_into: iid %u at %zd is outside %zd",
                         (unsigned)k, i, space);
            goto done;
        }
    }
    int64_t epoch = (int64_t)epoch_arg;
    uint16_t vcode = (uint16_t)venue_code, hcode = (uint16_t)handler_code;
    int64_t stamp = (int64_t)now;
    uint8_t *out = (uint8_t *)in[IN_COLS].buf;
    uint8_t *dirty = (uint8_t *)st[11].buf;
    Py_ssize_t applied = 0, duplicates = 0, regressions = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        uint16_t k;
        uint64_t s, cs;
        int64_t ce;
        memcpy(&k, iids + 2 * i, 2);
        memcpy(&s, (const uint8_t *)in[0].buf + 8 * i, 8);
        memcpy(&ce, (uint8_t *)st[0].buf + 8 * (Py_ssize_t)k, 8);
        memcpy(&cs, (uint8_t *)st[1].buf + 8 * (Py_ssize_t)k, 8);
        if (epoch > ce || (epoch == ce && s > cs)) {
            memcpy((uint8_t *)st[0].buf + 8 * (Py_ssize_t)k, &epoch, 8);
            memcpy((uint8_t *)st[1].buf + 8 * (Py_ssize_t)k, &s, 8);
            for (int c = 0; c < 6; c++) { /* bid ask last size venue_ts recv_ts -> decoded */
                memcpy((uint8_t *)st[2 + c].buf + 8 * (Py_ssize_t)k,
                       (const uint8_t *)in[2 + c].buf + 8 * i, 8);
            }
            memcpy((uint8_t *)st[8].buf + 8 * (Py_ssize_t)k, &stamp, 8);
            memcpy((uint8_t *)st[9].buf + 2 * (Py_ssize_t)k, &vcode, 2);
            memcpy((uint8_t *)st[10].buf + 2 * (Py_ssize_t)k, &hcode, 2);
            dirty[k] = 1;
            out[i] = APPLIED;
            applied++;
        }
        else if (epoch == ce && s == cs) {
            out[i] = DUPLICATE;
            duplicates++;
        }
        else {
            out[i] = REGRESSION;
            regressions++;
        }
    }
    result = Py_BuildValue("(nnn)", applied, duplicates, regressions);
done:
    for (int c = 0; c < got_in; c++) {
        PyBuffer_Release(&in[c]);
    }
    for (int c = 0; c < got_st; c++) {
        PyBuffer_Release(&st[c]);
    }
    return result;
}

static PyMethodDef admit_methods[] = {
    {"admit_into", admit_into, METH_VARARGS,
     "admit_into(epoch, venue, handler, now, columns, state) -> (applied, duplicates, "
     "regressions)"},
    {"admit_run", admit_run, METH_VARARGS,
     "admit_run(epoch, seq, iid, held_epoch, held_seq, verdict, seen) -> (applied, duplicates, "
     "regressions)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef admit_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_admit",
    .m_doc = "The admit rule over a batch's columns.",
    .m_size = -1,
    .m_methods = admit_methods,
};

PyMODINIT_FUNC
PyInit__admit(void)
{
    PyObject *module = PyModule_Create(&admit_module);
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
