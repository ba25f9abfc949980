/* The admit rule over a whole batch's columns (issue 35: ticks travel as columns), and the
   two passes around it: the sequencer's gate over a batch (gate_passes) and a feed handler's
   whole drain of a venue batch (normalize). The kernels, each documented where it is defined:
   admit_run, admit_into and admit_batch (the rule, over columns or over a batch's buffer),
   gate_passes, normalize. Their pure-Python twins: core/admit_batch.py, feeds/validate.py,
   feeds/normalize.py.

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

/* The rule for one tick: compare (epoch, s) with the held version at ``he``/``hs`` (8 bytes
   each, the instrument's row), raise the held version when it is newer. APPLIED, DUPLICATE or
   REGRESSION: the one comparison every kernel here makes, in batch order. */
static inline int
admit_one(int64_t epoch, uint64_t s, uint8_t *he, uint8_t *hs)
{
    int64_t ce;
    uint64_t cs;
    memcpy(&ce, he, 8);
    memcpy(&cs, hs, 8);
    if (epoch > ce || (epoch == ce && s > cs)) {
        memcpy(he, &epoch, 8);
        memcpy(hs, &s, 8);
        return APPLIED;
    }
    return epoch == ce && s == cs ? DUPLICATE : REGRESSION;
}

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
        uint64_t s;
        memcpy(&k, iids + 2 * i, 2);
        memcpy(&s, seqs + 8 * i, 8);
        int v = admit_one(epoch, s, he + 8 * (Py_ssize_t)k, hs + 8 * (Py_ssize_t)k);
        out[i] = (uint8_t)v;
        applied += v == APPLIED;
        duplicates += v == DUPLICATE;
        regressions += v == REGRESSION;
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
/* The rule and the state rows of admit_into over ``n`` rows of the columns at ``cols`` (seq,
   iid, bid, ask, last, size, venue_ts, recv_ts); ``counts`` gets applied, duplicates,
   regressions. -1 (IndexError set, nothing written) on an iid outside the state. */
static int
admit_rows(Py_ssize_t n, unsigned long long epoch_arg, unsigned int venue_code,
           unsigned int handler_code, long long now, const uint8_t *cols[8], uint8_t *out,
           Py_buffer *st, Py_ssize_t space, Py_ssize_t *counts)
{
    const uint8_t *iids = cols[1];
    for (Py_ssize_t i = 0; i < n; i++) {
        uint16_t k;
        memcpy(&k, iids + 2 * i, 2);
        if ((Py_ssize_t)k >= space) {
            PyErr_Format(PyExc_IndexError, "admit: iid %u at %zd is outside %zd", (unsigned)k, i,
                         space);
            return -1;
        }
    }
    int64_t epoch = (int64_t)epoch_arg;
    uint16_t vcode = (uint16_t)venue_code, hcode = (uint16_t)handler_code;
    int64_t stamp = (int64_t)now;
    uint8_t *dirty = (uint8_t *)st[11].buf;
    Py_ssize_t applied = 0, duplicates = 0, regressions = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        uint16_t k;
        uint64_t s;
        memcpy(&k, iids + 2 * i, 2);
        memcpy(&s, cols[0] + 8 * i, 8);
        Py_ssize_t row = (Py_ssize_t)k;
        int v =
            admit_one(epoch, s, (uint8_t *)st[0].buf + 8 * row, (uint8_t *)st[1].buf + 8 * row);
        out[i] = (uint8_t)v;
        if (v == APPLIED) {
            for (int c = 0; c < 6; c++) { /* bid ask last size venue_ts recv_ts -> decoded */
                memcpy((uint8_t *)st[2 + c].buf + 8 * row, cols[2 + c] + 8 * i, 8);
            }
            memcpy((uint8_t *)st[8].buf + 8 * row, &stamp, 8);
            memcpy((uint8_t *)st[9].buf + 2 * row, &vcode, 2);
            memcpy((uint8_t *)st[10].buf + 2 * row, &hcode, 2);
            dirty[k] = 1;
        }
        applied += v == APPLIED;
        duplicates += v == DUPLICATE;
        regressions += v == REGRESSION;
    }
    counts[0] = applied;
    counts[1] = duplicates;
    counts[2] = regressions;
    return 0;
}

/* The 12 state arrays of ``state_obj`` (a tuple): held_epoch held_seq bid ask last size
   venue_ts decoded admitted (8 bytes a row each), venue handler (2 each), dirty (1); ``got``
   counts the buffers taken (the caller releases them), ``space`` gets the rows. */
static int
take_state(PyObject *state_obj, Py_buffer *st, int *got, Py_ssize_t *space)
{
    static const Py_ssize_t st_size[STATE_COLS] = {8, 8, 8, 8, 8, 8, 8, 8, 8, 2, 2, 1};
    for (; *got < STATE_COLS; (*got)++) {
        if (PyObject_GetBuffer(PyTuple_GET_ITEM(state_obj, *got), &st[*got], PyBUF_WRITABLE) <
            0) {
            return -1;
        }
    }
    *space = st[11].len;
    for (int c = 0; c < STATE_COLS; c++) {
        if (st[c].len != *space * st_size[c]) {
            PyErr_SetString(PyExc_ValueError, "admit: the state arrays disagree in length");
            return -1;
        }
    }
    return 0;
}

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
    /* columns: seq(8) iid(2) bid ask last size venue_ts recv_ts (8 each), verdict(1) */
    Py_ssize_t n = in[1].len / 2;
    static const Py_ssize_t in_size[IN_COLS + 1] = {8, 2, 8, 8, 8, 8, 8, 8, 1};
    for (int c = 0; c < IN_COLS + 1; c++) {
        if (in[c].len != n * in_size[c]) {
            PyErr_SetString(PyExc_ValueError, "admit_into: the columns disagree in length");
            goto done;
        }
    }
    Py_ssize_t space;
    if (take_state(state_obj, st, &got_st, &space) < 0) {
        goto done;
    }
    const uint8_t *cols[IN_COLS];
    for (int c = 0; c < IN_COLS; c++) {
        cols[c] = (const uint8_t *)in[c].buf;
    }
    Py_ssize_t counts[3];
    if (admit_rows(n, epoch_arg, venue_code, handler_code, now, cols, (uint8_t *)in[IN_COLS].buf,
                   st, space, counts) < 0) {
        goto done;
    }
    result = Py_BuildValue("(nnn)", counts[0], counts[1], counts[2]);
done:
    for (int c = 0; c < got_in; c++) {
        PyBuffer_Release(&in[c]);
    }
    for (int c = 0; c < got_st; c++) {
        PyBuffer_Release(&st[c]);
    }
    return result;
}


/* normalize(buffer, n, code_of, code, need_id, fence, epoch, header, now, held_epoch, held_seq)
   -> (bytes, backwards) or None

   A feed handler's whole drain of one venue batch (issue 35), when every update passes: the
   door's checks (each instrument this venue's, per ``code_of``: uint16 per wire id; both stamps
   >= 0; an update id on each update when ``need_id``), every update at or past the newest
   epoch's ``fence`` (so all of them take ``epoch``), then the own-stream rule (``admit_run``'s
   comparison of the update's (epoch, seq) with the newest the handler delivered of its
   instrument; an older one counts as ``backwards`` and is delivered all the same), and the batch
   as the handler delivers it: a copy of ``buffer`` with ``header`` (64 bytes) in front, seq
   from the update id (``need_id``) or the venue timestamp, every recv_ts ``now``.

   None when any update fails a check: nothing is written, and the handler takes its Python
   path, which refuses and counts each failure by reason and splits a drain across epochs.
   Why in C: with that path a drain of a ~20-tick batch (one per venue each millisecond at
   120k ticks/s) cost ~30 us whatever its size; with this call ~5 us, the Python around it
   included. The column
   offsets are those of wire/batch.py's COLUMNS (seq, update_id, bid, ask, last, size, venue_ts,
   recv_ts: 8 bytes each; iid: 2; flags: 1); the twin is
   monotape.platform.feeds.normalize.python_normalize, held to this byte for byte by the tests. */
#define BATCH_HEADER 64
#define ROW 67
#define HAS_UPDATE_ID 0x01
/* Whether every tick of the batch whose columns start at ``in`` (``n`` rows) passes the door:
   an instrument of venue ``code`` (``code_of``: uint16 per wire id, 0 for none; ids at or
   past ``limit`` are none), both stamps >= 0 and the venue's at or past ``fence``, and, when
   ``need_id``, an update id on each. The one check normalize and gate_passes both make. */
static int
door_passes(const uint8_t *in, Py_ssize_t n, const uint8_t *code_of, Py_ssize_t limit,
            unsigned int code, int64_t fence, int need_id)
{
    const uint8_t *vts = in + 48 * n, *rts = in + 56 * n, *iids = in + 64 * n;
    const uint8_t *flags = in + 66 * n;
    if (code == 0) {
        return 0;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        uint16_t k, c = 0;
        int64_t v, r;
        memcpy(&k, iids + 2 * i, 2);
        memcpy(&v, vts + 8 * i, 8);
        memcpy(&r, rts + 8 * i, 8);
        if ((Py_ssize_t)k < limit) {
            memcpy(&c, code_of + 2 * (Py_ssize_t)k, 2);
        }
        if (c != code || v < 0 || v < fence || r < 0 ||
            (need_id && !(flags[i] & HAS_UPDATE_ID))) {
            return 0;
        }
    }
    return 1;
}

static PyObject *
normalize(PyObject *Py_UNUSED(module), PyObject *args)
{
    Py_ssize_t n;
    unsigned int code;
    int need_id;
    long long fence, now;
    unsigned long long epoch_arg;
    Py_buffer buf = {0}, codes = {0}, header = {0}, held_epoch = {0}, held_seq = {0};
    PyObject *result = NULL;
    if (!PyArg_ParseTuple(args, "y*ny*IpLKy*Lw*w*", &buf, &n, &codes, &code, &need_id, &fence,
                          &epoch_arg, &header, &now, &held_epoch, &held_seq)) {
        return NULL;
    }
    if (epoch_arg > (unsigned long long)INT64_MAX) {
        PyErr_SetString(PyExc_OverflowError, "normalize: epoch beyond int64");
        goto done;
    }
    Py_ssize_t space = held_seq.len / 8;
    if (n < 0 || buf.len != BATCH_HEADER + n * ROW || header.len != BATCH_HEADER ||
        codes.len % 2 != 0 || held_epoch.len != space * 8 || held_seq.len != space * 8) {
        PyErr_SetString(PyExc_ValueError, "normalize: a buffer disagrees with its length");
        goto done;
    }
    const uint8_t *in = (const uint8_t *)buf.buf + BATCH_HEADER;
    const uint8_t *ids = in + 8 * n, *vts = in + 48 * n, *iids = in + 64 * n;
    Py_ssize_t known = codes.len / 2;
    if (!door_passes(in, n, (const uint8_t *)codes.buf, known < space ? known : space, code,
                     fence, need_id)) { /* every check before anything is written */
        result = Py_None; /* the Python path refuses and counts it */
        Py_INCREF(result);
        goto done;
    }
    int64_t epoch = (int64_t)epoch_arg;
    uint8_t *he = (uint8_t *)held_epoch.buf, *hs = (uint8_t *)held_seq.buf;
    const uint8_t *seq_src = need_id ? ids : vts;
    Py_ssize_t backwards = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        uint16_t k;
        uint64_t s;
        memcpy(&k, iids + 2 * i, 2);
        memcpy(&s, seq_src + 8 * i, 8);
        backwards += admit_one(epoch, s, he + 8 * (Py_ssize_t)k, hs + 8 * (Py_ssize_t)k) ==
                     REGRESSION;
    }
    PyObject *out = PyBytes_FromStringAndSize(NULL, buf.len);
    if (out == NULL) {
        goto done;
    }
    uint8_t *o = (uint8_t *)PyBytes_AS_STRING(out);
    memcpy(o, header.buf, BATCH_HEADER);
    memcpy(o + BATCH_HEADER, in, (size_t)(n * ROW));
    memcpy(o + BATCH_HEADER, seq_src, (size_t)(8 * n));
    int64_t stamp = (int64_t)now;
    for (Py_ssize_t i = 0; i < n; i++) {
        memcpy(o + BATCH_HEADER + 56 * n + 8 * i, &stamp, 8);
    }
    result = Py_BuildValue("(Nn)", out, backwards);
done:
    PyBuffer_Release(&buf);
    PyBuffer_Release(&codes);
    PyBuffer_Release(&header);
    PyBuffer_Release(&held_epoch);
    PyBuffer_Release(&held_seq);
    return result;
}

/* admit_batch(epoch, venue, handler, now, buffer, n, verdict, state) -> (applied, duplicates,
   regressions)

   ``admit_into`` over a tick batch's own buffer (wire/batch.py: a 64-byte header, then the
   columns seq update_id bid ask last size venue_ts recv_ts, 8 bytes a tick each, then iid):
   the sequencer's admit of a bus batch without a column view per column (eight views were
   ~5 us a batch, 12,000 batches a second at 120k ticks/s). */
static PyObject *
admit_batch(PyObject *Py_UNUSED(module), PyObject *args)
{
    unsigned long long epoch_arg;
    unsigned int venue_code, handler_code;
    long long now;
    Py_ssize_t n;
    Py_buffer buf = {0}, verdict = {0};
    PyObject *state_obj;
    if (!PyArg_ParseTuple(args, "KIILy*nw*O!", &epoch_arg, &venue_code, &handler_code, &now,
                          &buf, &n, &verdict, &PyTuple_Type, &state_obj)) {
        return NULL;
    }
    Py_buffer st[STATE_COLS];
    int got_st = 0;
    PyObject *result = NULL;
    if (PyTuple_GET_SIZE(state_obj) != STATE_COLS) {
        PyErr_SetString(PyExc_TypeError, "admit_batch: 12 state arrays");
        goto done;
    }
    if (epoch_arg > (unsigned long long)INT64_MAX || venue_code > 0xFFFF || handler_code > 0xFFFF) {
        PyErr_SetString(PyExc_OverflowError,
                        "admit_batch: epoch beyond int64 or a code beyond u16");
        goto done;
    }
    if (n < 0 || buf.len != BATCH_HEADER + n * ROW || verdict.len != n) {
        PyErr_SetString(PyExc_ValueError, "admit_batch: the buffer or verdict disagrees with n");
        goto done;
    }
    Py_ssize_t space;
    if (take_state(state_obj, st, &got_st, &space) < 0) {
        goto done;
    }
    const uint8_t *in = (const uint8_t *)buf.buf + BATCH_HEADER;
    /* seq iid bid ask last size venue_ts recv_ts, as admit_rows wants them */
    const uint8_t *cols[IN_COLS] = {in,          in + 64 * n, in + 16 * n, in + 24 * n,
                                    in + 32 * n, in + 40 * n, in + 48 * n, in + 56 * n};
    Py_ssize_t counts[3];
    if (admit_rows(n, epoch_arg, venue_code, handler_code, now, cols, (uint8_t *)verdict.buf, st,
                   space, counts) < 0) {
        goto done;
    }
    result = Py_BuildValue("(nnn)", counts[0], counts[1], counts[2]);
done:
    PyBuffer_Release(&buf);
    PyBuffer_Release(&verdict);
    for (int c = 0; c < got_st; c++) {
        PyBuffer_Release(&st[c]);
    }
    return result;
}

/* gate_passes(buffer, n, code_of, code) -> bool

   The tick gate's common case over a batch's buffer (feeds/validate.py, ``refused_mask``):
   every instrument is one of venue ``code``'s (``code_of``: uint16 per wire id, 0 for none)
   and both stamps are >= 0. False sends the gate to its numpy path, which says which ticks and
   why. Four numpy reductions and a gather were ~8 us a batch on the sequencer's side. */
static PyObject *
gate_passes(PyObject *Py_UNUSED(module), PyObject *args)
{
    Py_ssize_t n;
    unsigned int code;
    Py_buffer buf = {0}, codes = {0};
    if (!PyArg_ParseTuple(args, "y*ny*I", &buf, &n, &codes, &code)) {
        return NULL;
    }
    PyObject *result = NULL;
    if (n < 0 || buf.len != BATCH_HEADER + n * ROW || codes.len % 2 != 0) {
        PyErr_SetString(PyExc_ValueError, "gate_passes: a buffer disagrees with its length");
        goto done;
    }
    const uint8_t *in = (const uint8_t *)buf.buf + BATCH_HEADER;
    int passes = door_passes(in, n, (const uint8_t *)codes.buf, codes.len / 2, code, 0, 0);
    result = PyBool_FromLong(passes);
done:
    PyBuffer_Release(&buf);
    PyBuffer_Release(&codes);
    return result;
}

static PyMethodDef admit_methods[] = {
    {"admit_batch", admit_batch, METH_VARARGS,
     "admit_batch(epoch, venue, handler, now, buffer, n, verdict, state) -> (applied, "
     "duplicates, regressions)"},
    {"gate_passes", gate_passes, METH_VARARGS, "gate_passes(buffer, n, code_of, code) -> bool"},
    {"normalize", normalize, METH_VARARGS,
     "normalize(buffer, n, code_of, code, need_id, fence, epoch, header, now, held_epoch, "
     "held_seq) -> (bytes, backwards) or None"},
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
