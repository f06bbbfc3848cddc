/*
 * exactbatch._core: the compiled row gather (see the module docstring, DOC, below).
 * This file is its module table; the concerns live in files of their own (_core.h).
 *
 * Built by setuptools as an optional extension: when it fails to compile,
 * exactbatch installs and runs on its pure NumPy path (exactbatch.kernels),
 * which gives bit-identical batches.
 */
#include "_core.h"

#include "_core_bijection.h"
#include "_core_codes.h"
#include "_core_columns.h"
#include "_core_fits.h"
#include "_core_hand.h"
#include "_core_into.h"
#include "_core_mapping.h"
#include "_core_parts.h"
#include "_core_rows.h"
#include "_core_rows32.h"
#include "_core_split.h"
#include "_core_transform.h"

PyDoc_STRVAR(DOC,
"The compiled kernels behind exactbatch.kernels (use that module, not this one).\n"
"\n"
"``memory_rows(x, y)`` and\n"
"``file_rows(mapping, offset, n, d, l, fd, size, mtime_ns, ctime_ns)``\n"
"describe where rows live: two float64 C-contiguous arrays, or the rows of an\n"
"``.ndf`` file's read-only mapping (x then y per row, 8*(d+l) bytes from\n"
"``offset``). Their ``read(rows, out_x, out_y[, transform])`` gathers rows (a slice, or an\n"
"int32/int64 index array) into float64 or float32 batch buffers in one pass,\n"
"casting as it copies, with the GIL released; runs of consecutive rows are\n"
"found as it goes and copied with one memcpy where the layout allows.\n"
"\n"
"Copies out of a mapping run under a guard: a SIGBUS (or SIGSEGV) raised by a\n"
"read of the mapped range on the copying thread (the file was truncated\n"
"during the copy) jumps out of the copy (sigsetjmp/siglongjmp), and ``read``\n"
"raises ``FileChanged``, which the .ndf reader turns into ``NdfError`` naming\n"
"the file (on whichever thread a split read's fault happens: see below). Any\n"
"other fault goes to the handler this one displaced. Before every\n"
"guarded read the guard checks that it is still installed and, where another\n"
"handler took its place (faulthandler, signal.signal, a library's sigaction),\n"
"puts itself back, chaining to that handler.\n"
"After every copy from a file one ``fstat`` (with the GIL still released)\n"
"checks that the file kept its size, modification time and change time\n"
"(ctime), so a truncation inside the last page (read as zeros, no fault) or a\n"
"rewrite in place (even one whose modification time was put back) is caught\n"
"too. So the compiled path takes no read lease: the lease\n"
"(exactbatch.ndf.guard) is kept only for the pure NumPy path, which cannot\n"
"catch a fault.\n"
"\n"
"A read's fifth argument, ``threads`` (None: the rows object's ``threads``,\n"
"0 by default: one thread a 256 KiB of rows, at most the usable cores less\n"
"one), splits\n"
"its rows into consecutive ranges copied at once by the calling thread and a\n"
"pool of C threads (joined at interpreter exit, absent from a forked child);\n"
"the batch is the same bytes whatever the count.\n");

static PyMethodDef core_methods[] = {
    {"memory_rows", memory_rows, METH_VARARGS,
     "memory_rows(x, y)\n--\n\nRows of two float64 2-D arrays (x (n, d), y (n, l)), each row's values "
     "side by side (C-contiguous, or columns of a C-contiguous array)."},
    {"file_rows", file_rows, METH_VARARGS,
     "file_rows(mapping, offset, n, d, l, fd, size, mtime_ns, ctime_ns, changed=None)\n--\n\n"
     "Rows of an .ndf file's read-only mapping (x then y per row, from byte offset);\n"
     "after each copy fd must still have at least size bytes and (each when >= 0) that\n"
     "modification time and change time, else FileChanged (or what changed, a callable\n"
     "given it, raises instead: the Rows' changed). Installs the fault guard on first use."},
    {"map_file", map_file, METH_VARARGS,
     "map_file(fd, length)\n--\n\n"
     "A read-only shared mapping of the first length bytes of file fd, as a buffer (as\n"
     "mmap.mmap's, but holding no descriptor of its own; unmapped when freed)."},
    {"parts_rows", parts_rows, METH_VARARGS,
     "parts_rows(starts, d, l)\n--\n\n"
     "Rows of a sharded dataset: part k holds global rows starts[k] .. starts[k + 1] - 1\n"
     "(starts: int64, from 0, n last); give each part's file_rows with set(k, rows)\n"
     "once it is open."},
    {"pair_fits", (PyCFunction)(void (*)(void))pair_fits, METH_FASTCALL,
     "pair_fits(bx, by, rows, d, l, itemsize)\n--\n\n"
     "Whether bx and by are writeable C-contiguous NumPy arrays of shapes (rows, d) and\n"
     "(rows, l), both float64 (itemsize 8) or both float32 (4): next_into's check."},
    {"run_jobs", (PyCFunction)(void (*)(void))run_jobs, METH_FASTCALL,
     "run_jobs(job_type, run, k0, k1, b, n, digests)\n--\n\n"
     "[job_type(run, k, size, digests[k], k * b) for k in k0 .. k1 - 1], each of b rows or\n"
     "the rest of n: a claim's jobs of an epoch's whole order, in one loop (job_type a\n"
     "tuple subclass with no fields of its own, digests a 1-D uint64 buffer)."},
    {"waited", (PyCFunction)(void (*)(void))waited, METH_FASTCALL,
     "waited(slot, t0, at, hist)\n--\n\n"
     "now (perf_counter_ns's clock): slot[at] += now - t0, and with hist >= 0 one more in\n"
     "slot[hist + bucket] (a telemetry slot's histogram of 8 buckets a power of two)."},
    {"into", (PyCFunction)(void (*)(void))into_new, METH_FASTCALL,
     "into(checks, holder, cursor, telemetry, waits, job_type, draining)\n--\n\n"
     "next_into's hand-out in one call (exactbatch.loader.handout.HandOut's twin)."},
    {"waited_on", (PyCFunction)(void (*)(void))waited_on, METH_FASTCALL,
     "waited_on(tel, t0, at, hist)\n--\n\n"
     "waited() into the calling thread's slot of the Telemetry tel (tel._local.slot, or\n"
     "tel._slot()), then tel._report_now(now) when now >= tel._due; None."},
    {"transform", transform_new, METH_VARARGS,
     "transform(mean, scale, fill)\n--\n\n"
     "A Transform for read(): each feature (v - mean) * scale as it is copied (mean and\n"
     "scale 1-D float64 arrays of d values), a NaN then replaced by fill (a float, a\n"
     "1-D float64 array of d values, NaN where a column keeps its NaN, or None to keep\n"
     "NaN)."},
    {"columns_into", columns_into, METH_VARARGS,
     "columns_into(cols, start, out)\n--\n\n"
     "out[i, j] = cols[j][start + i]: rows of 1-D C-contiguous columns (float64, float32, or\n"
     "integers of at most 32 bits) into out, a\n"
     "2-D float64 or float32 array of len(cols) values a row, side by side (its rows any\n"
     "stride apart), cast as they are copied, with the GIL released."},
    {"take_rows32", take_rows32, METH_VARARGS,
     "take_rows32(x, y, rows, out_x, out_y)\n--\n\n"
     "out_x[i], out_y[i] = x[rows[i]], y[rows[i]]: rows of float32 x (n, d) and y (n, l)\n"
     "(each row's values side by side: a float32 shuffle buffer's whole rows) into\n"
     "C-contiguous float32 out_x (r, d) and out_y (r, l), their bytes as they are; rows\n"
     "a 1-D int64 array, each in [0, n) (IndexError else), with the GIL released."},
    {"string_keys", string_keys, METH_VARARGS,
     "string_keys(offsets, data, out)\n--\n\n"
     "out[i]: the 64-bit key of string i (bytes offsets[i] .. offsets[i + 1] - 1 of data;\n"
     "offsets int32 or int64), as exactbatch.sources.string_keys.string_keys computes it."},
    {"index_codes", index_codes, METH_VARARGS,
     "index_codes(keys, offsets, data, index_keys, index_codes, starts, shift, vocab_offsets,\n"
     "vocab_data, out, found)\n--\n\n"
     "Each string's code in a StringIndex (its sorted keys, their codes, the bucket starts\n"
     "by a key's top bits): the entry with its key whose bytes equal it; NaN and found\n"
     "False where none, with the GIL released."},
    {"take_codes", take_codes, METH_VARARGS,
     "take_codes(indices, validity, bit_offset, table, found, out)\n--\n\n"
     "out[i] = table[indices[i]] (NaN where the validity bitmap, or None, says null); returns\n"
     "the first row whose index's entry is not found, or -1. An index outside the table\n"
     "is a ValueError."},
    {"bijection", bijection, METH_VARARGS,
     "bijection(n, q, swap01, plan)\n--\n\n"
     "An epoch's keyed bijection (exactbatch.order.bijection), for rows() and map()."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef core_module = {
    PyModuleDef_HEAD_INIT, "exactbatch._core", DOC, -1, core_methods,
};

PyMODINIT_FUNC PyInit__core(void)
{
    PyObject *m = PyModule_Create(&core_module);
    if (m == NULL)
        return NULL;
    if (errors_ready(m) < 0 || rows_ready(m) < 0 || mapping_ready() < 0 || fits_ready() < 0 ||
        hand_ready() < 0 || into_ready() < 0 ||
        transform_ready(m) < 0 || parts_ready(m) < 0 || bijection_ready(m) < 0 ||
        split_ready() < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
