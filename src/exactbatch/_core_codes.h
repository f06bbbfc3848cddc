/*
 * Categorical strings coded a chunk at once: each string's 64-bit key, its code found in
 * a vocabulary's index of sorted keys (the entry EQUAL to it, checked byte for byte), and
 * a dictionary-encoded chunk's codes taken by its indices. The pure NumPy twins are
 * exactbatch.sources.string_keys's (same keys, same codes).
 */
#ifndef EXACTBATCH_CORE_CODES_H
#define EXACTBATCH_CORE_CODES_H

#include "_core.h"

PyObject *string_keys(PyObject *mod, PyObject *args);
PyObject *index_codes(PyObject *mod, PyObject *args);
PyObject *take_codes(PyObject *mod, PyObject *args);

#endif
