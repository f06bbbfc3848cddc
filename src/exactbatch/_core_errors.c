/* The exceptions the units raise (declared in _core.h): made here, so that no unit
 * needs the module table (_core.c) that includes them all. */
#include "_core.h"

PyObject *FileChanged; /* raised by read(): the caller names the file */

int errors_ready(PyObject *module)
{
    FileChanged = PyErr_NewExceptionWithDoc(
        "exactbatch._core.FileChanged",
        "A file's rows could not be copied: it was truncated or rewritten while open.",
        PyExc_OSError, NULL);
    if (FileChanged == NULL)
        return -1;
    return PyModule_AddObjectRef(module, "FileChanged", FileChanged);
}
