// src/providers/python.cpp — the embedded interpreter and the rows of Python provider modules.
//
// One interpreter per process, started on first use with the configured Python (its venv's
// site-packages) and lav's own Python package on the path. A provider gets lav's tensors
// themselves and hands its own back (their TensorImpls); a prologue's inputs cross as DLPack
// capsules. lav/_provider_call.py does the calling and the autograd on the Python side.
#define PY_SSIZE_T_CLEAN
#include <Python.h>
// Python.h first, as its documentation asks
#include <ATen/ATen.h>
#include <ATen/DLConvertor.h>
#include <ATen/record_function.h>
#include <c10/core/GradMode.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <unordered_map>
#include <utility>

#include "core/error.h"
#include "harness/prologue.h"
#include "providers/provider.h"
#include "providers/python.h"

namespace lav::providers {
namespace {

// A new reference, released when it goes out of scope.
class Ref {
  public:
    explicit Ref(PyObject* p = nullptr) : p_(p) {}
    Ref(const Ref&) = delete;
    Ref& operator=(const Ref&) = delete;
    Ref(Ref&& o) noexcept : p_(o.p_) { o.p_ = nullptr; }
    Ref& operator=(Ref&& o) noexcept {
        std::swap(p_, o.p_);
        return *this;
    }
    ~Ref() { Py_XDECREF(p_); }
    PyObject* get() const { return p_; }
    explicit operator bool() const { return p_ != nullptr; }

  private:
    PyObject* p_;
};

// The pending Python exception as text: its last line and the provider's frames nearest it
// (lav._provider_call.describe_error), or the whole traceback where that is not importable.
std::string python_error() {
    PyObject *type = nullptr, *value = nullptr, *trace = nullptr;
    PyErr_Fetch(&type, &value, &trace);
    PyErr_NormalizeException(&type, &value, &trace);
    Ref t(type), v(value), tb(trace);
    if (tb) PyException_SetTraceback(v.get(), tb.get());
    std::string text = "Python error";
    Ref shim(PyImport_ImportModule("lav._provider_call"));
    Ref described(shim && v ? PyObject_CallMethod(shim.get(), "describe_error", "O", v.get())
                            : nullptr);
    if (!described && v) {
        PyErr_Clear();
        Ref tb_mod(PyImport_ImportModule("traceback"));
        Ref lines(tb_mod ? PyObject_CallMethod(tb_mod.get(), "format_exception", "O", v.get())
                         : nullptr);
        Ref empty(PyUnicode_FromString(""));
        if (lines) described = Ref(PyUnicode_Join(empty.get(), lines.get()));
    }
    if (described) text = PyUnicode_AsUTF8(described.get());
    PyErr_Clear();
    while (!text.empty() && text.back() == '\n') text.pop_back();
    return text;
}

Ref checked(PyObject* p, const std::string& what) {
    if (!p) throw ShapeError(what + ": " + python_error());
    return Ref(p);
}

void start_interpreter() {
    if (Py_IsInitialized()) return;
    PyConfig config;
    PyConfig_InitPythonConfig(&config);
    // the configured interpreter's own path calculation finds its venv and site-packages
    const char* python = std::getenv("LAV_PYTHON");
    const std::string executable = python && *python ? python : LAV_PYTHON_EXECUTABLE;
    PyStatus status = PyConfig_SetBytesString(&config, &config.program_name, executable.c_str());
    if (!PyStatus_Exception(status)) status = Py_InitializeFromConfig(&config);
    PyConfig_Clear(&config);
    LAV_CHECK_AS(EnvironmentError, !PyStatus_Exception(status), "cannot start Python (", executable,
                 "): ", status.err_msg ? status.err_msg : "unknown error");
    {
        // lav's own package (lav._provider_call) from the source tree
        Ref sys_path(PySys_GetObject("path"));  // borrowed: keep it alive while we use it
        Py_XINCREF(sys_path.get());
        Ref dir(PyUnicode_FromString(LAV_PYTHON_PACKAGE_DIR));
        PyList_Insert(sys_path.get(), 0, dir.get());
    }
    // calls into Python take the GIL (Gil) and give it back: LibTorch's autograd refuses to run
    // while this thread holds it, and C++ rows run their backward after Python ran
    PyEval_SaveThread();
}

// Holds the GIL for its scope; declared before the Refs it guards, so it outlives them.
class Gil {
  public:
    Gil() : state_(PyGILState_Ensure()) {}
    ~Gil() { PyGILState_Release(state_); }
    Gil(const Gil&) = delete;
    Gil& operator=(const Gil&) = delete;

  private:
    PyGILState_STATE state_;
};

// The deleter of a capsule that still owns its tensor (Python never consumed it).
void release_capsule(PyObject* capsule) {
    if (!PyCapsule_IsValid(capsule, "dltensor")) return;
    auto* managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule, "dltensor"));
    if (managed && managed->deleter) managed->deleter(managed);
}

// A DLPack capsule of `t` (None if undefined): the prologue's inputs, new tensors sharing its
// memory, so that what the user's code does to their metadata stays its own.
Ref dlpack_capsule(const at::Tensor& t) {
    if (!t.defined()) {
        Py_INCREF(Py_None);
        return Ref(Py_None);
    }
    return checked(PyCapsule_New(at::toDLPack(t), "dltensor", release_capsule), "to DLPack");
}

// The Python tensor of `t` itself (None if undefined), made by torch from its TensorImpl
// (torch._C._wrap_tensor_impl, found when the first provider loads): no conversion, and the
// tracer knows it by name. DLPack both ways was half the Python side of a call.
PyObject* wrap_tensor_impl = nullptr;

Ref python_tensor(const at::Tensor& t) {
    if (!t.defined()) {
        Py_INCREF(Py_None);
        return Ref(Py_None);
    }
    Ref impl = checked(PyCapsule_New(t.unsafeGetTensorImpl(), nullptr, nullptr), "capsule");
    return checked(PyObject_CallOneArg(wrap_tensor_impl, impl.get()), "tensor to Python");
}

// The Python tensor whose TensorImpl is `cdata` (Tensor._cdata) as an at::Tensor sharing that
// TensorImpl: the tracer knows tensors by TensorImpl, and DLPack would make a new one.
at::Tensor same_tensor(PyObject* cdata) {
    auto* impl = static_cast<c10::TensorImpl*>(PyLong_AsVoidPtr(cdata));
    LAV_ASSERT(impl != nullptr, "a Python tensor without a TensorImpl");
    return at::Tensor(
        c10::intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>::reclaim_copy(impl));
}

// A provider's result (a torch.Tensor, the shim has checked, or None) as the tensor itself.
at::Tensor from_python(PyObject* tensor) {
    if (tensor == Py_None) return {};
    return same_tensor(checked(PyObject_GetAttrString(tensor, "_cdata"), "Tensor._cdata").get());
}

Ref tensor_dict(const TensorMap& tensors, Ref (*convert)(const at::Tensor&) = python_tensor) {
    Ref d = checked(PyDict_New(), "dict");
    for (const auto& [name, t] : tensors)
        PyDict_SetItemString(d.get(), name.c_str(), convert(t).get());
    return d;
}

// The settings of provider.h, and the family's options as strings.
Ref settings_dict(const Call& call) {
    Ref d = checked(PyDict_New(), "dict");
    const auto set = [&](const char* name, Ref value) {
        PyDict_SetItemString(d.get(), name, value.get());
    };
    set("scale", Ref(PyFloat_FromDouble(call.scale)));
    set("head_first", Ref(PyBool_FromLong(call.layout == Layout::head_first)));
    set("cu_seqlens", python_tensor(call.cu_seqlens_tensor()));
    set("chunk_size", Ref(PyLong_FromLongLong(call.chunk_size)));
    set("state_dtype", Ref(PyUnicode_FromString(c10::toString(call.state_dtype))));
    set("output_dtype", Ref(PyUnicode_FromString(c10::toString(call.output_dtype))));
    for (const auto& [name, value] : call.options)
        set(name.c_str(), Ref(PyUnicode_FromString(value.c_str())));
    return d;
}

Ref string_list(const std::vector<std::string>& items) {
    Ref list = checked(PyList_New(0), "list");
    for (const auto& s : items)
        PyList_Append(list.get(), Ref(PyUnicode_FromString(s.c_str())).get());
    return list;
}

// The seconds a provider's jit_seconds() counts (its kernels' compiling and autotuning so far),
// or 0 for a provider without one; load_python_provider has checked that it returns a number.
double jit_clock(PyObject* clock) {
    if (!clock) return 0;
    Ref seconds(PyObject_CallNoArgs(clock));
    const double out = seconds ? PyFloat_AsDouble(seconds.get()) : 0;
    PyErr_Clear();
    return out;
}

// Adds what a call spent compiling and autotuning to lav's count (core/row.h), also when the
// call raises: FLA compiles its forward before it refuses a backward. Declared after the Gil.
class JitCount {
  public:
    explicit JitCount(PyObject* clock) : clock_(clock), before_(jit_clock(clock)) {}
    ~JitCount() { add_jit_seconds(jit_clock(clock_) - before_); }
    JitCount(const JitCount&) = delete;
    JitCount& operator=(const JitCount&) = delete;

  private:
    PyObject* clock_;
    double before_;
};

Callable python_callable(PyObject* shim, PyObject* fn, PyObject* clock, const std::string& label) {
    Py_INCREF(shim);
    Py_INCREF(fn);
    Py_XINCREF(clock);
    // the interpreter lives as long as the process: these references are never dropped
    Callable c;
    c.forward = [shim, fn, clock, label](const Call& call, const TensorMap& inputs) {
        const Gil gil;
        const JitCount jit(clock);
        const c10::NoGradGuard no_grad;  // torch.no_grad() in C++: the same thread-local mode
        Ref out = checked(PyObject_CallMethod(shim, "forward", "OOO", fn, tensor_dict(inputs).get(),
                                              settings_dict(call).get()),
                          label);
        std::vector<at::Tensor> outputs;
        for (Py_ssize_t i = 0; i < PyList_Size(out.get()); ++i)
            outputs.push_back(from_python(PyList_GetItem(out.get(), i)));
        return outputs;
    };
    c.backward = [shim, fn, clock, label](const Call& call, const TensorMap& inputs,
                                          const std::vector<std::string>& differentiated,
                                          const std::vector<at::Tensor>& cotangents) {
        const Gil gil;
        const JitCount jit(clock);
        Ref seeds = checked(PyList_New(0), "list");
        for (const at::Tensor& t : cotangents) PyList_Append(seeds.get(), python_tensor(t).get());
        Ref out = checked(PyObject_CallMethod(shim, "backward", "OOOOO", fn,
                                              tensor_dict(inputs).get(), settings_dict(call).get(),
                                              string_list(differentiated).get(), seeds.get()),
                          label);
        TensorMap grads;
        for (size_t i = 0; i < differentiated.size(); ++i)
            grads["d" + differentiated[i]] =
                from_python(PyList_GetItem(out.get(), static_cast<Py_ssize_t>(i)));
        return grads;
    };
    return c;
}

std::string text_of(PyObject* o) {
    Ref s = checked(PyObject_Str(o), "str");
    return PyUnicode_AsUTF8(s.get());
}

}  // namespace

std::string python_unavailable() { return ""; }

Loaded load_python_provider(const std::string& module, harness::Registry& registry) {
    start_interpreter();
    const Gil gil;
    Ref shim(PyImport_ImportModule("lav._provider_call"));
    LAV_CHECK_AS(EnvironmentError, shim, "--provider ", module,
                 ": cannot import lav's Python package from ", LAV_PYTHON_PACKAGE_DIR, ": ",
                 python_error());
    if (!wrap_tensor_impl) {
        Ref torch_c(PyImport_ImportModule("torch._C"));
        wrap_tensor_impl =
            torch_c ? PyObject_GetAttrString(torch_c.get(), "_wrap_tensor_impl") : nullptr;
        LAV_CHECK_AS(EnvironmentError, wrap_tensor_impl, "--provider ", module,
                     ": this torch has no torch._C._wrap_tensor_impl to hand tensors over by: ",
                     python_error());
    }
    Ref mod(PyObject_CallMethod(shim.get(), "load", "s", module.c_str()));
    LAV_CHECK_AS(UsageError, mod, "--provider ", module, ": ", python_error());
    Loaded loaded;
    Ref name(PyObject_CallMethod(shim.get(), "provider_name", "O", mod.get()));
    LAV_CHECK_AS(UsageError, name, "--provider ", module, ": ", python_error());
    loaded.backend = text_of(name.get());
    Ref versions(PyObject_CallMethod(shim.get(), "versions", "O", mod.get()));
    LAV_CHECK_AS(UsageError, versions, "--provider ", module, ": versions(): ", python_error());
    PyObject *key = nullptr, *value = nullptr;
    for (Py_ssize_t pos = 0; PyDict_Next(versions.get(), &pos, &key, &value);)
        loaded.versions[text_of(key)] = text_of(value);
    Ref device_obj(PyObject_CallMethod(shim.get(), "device", "O", mod.get()));
    LAV_CHECK_AS(UsageError, device_obj, "--provider ", module, ": ", python_error());
    const std::string device = text_of(device_obj.get());
    LAV_CHECK_AS(UsageError, device == "cpu" || device == "cuda", "--provider ", module,
                 ": DEVICE must be \"cpu\" or \"cuda\", got \"", device, "\"");
    // jit_seconds(), where the module has it: seconds its kernels spent compiling and autotuning
    Ref clock(PyObject_HasAttrString(mod.get(), "jit_seconds")
                  ? PyObject_GetAttrString(mod.get(), "jit_seconds")
                  : nullptr);
    if (clock) {
        Ref first(PyObject_CallNoArgs(clock.get()));
        LAV_CHECK_AS(UsageError, first && PyNumber_Check(first.get()), "--provider ", module,
                     ": jit_seconds() must return the seconds its kernels have spent compiling ",
                     "so far, as a number", first ? std::string() : ": " + python_error());
    }
    size_t rows = 0;
    for (const harness::Family& f : registry.families())
        for (const std::string& variant : f.variants) {
            const std::string fn_name = variant + "_" + f.name;
            const Row* declared = registry.rows().find(f.name, variant, "cpu");
            if (!declared) continue;
            if (!PyObject_HasAttrString(mod.get(), fn_name.c_str())) {
                Ref why = checked(PyObject_CallMethod(shim.get(), "absent", "Oss", mod.get(),
                                                      f.name.c_str(), variant.c_str()),
                                  fn_name);
                registry.rows().add_absence(f.name, variant, loaded.backend, text_of(why.get()));
                continue;
            }
            Ref fn(PyObject_GetAttrString(mod.get(), fn_name.c_str()));
            Ref bound = checked(PyObject_CallMethod(shim.get(), "bind", "OOss", mod.get(), fn.get(),
                                                    f.name.c_str(), variant.c_str()),
                                fn_name);
            registry.rows().add(provider_row(f, variant, loaded.backend, device, *declared,
                                             python_callable(shim.get(), bound.get(), clock.get(),
                                                             loaded.backend + " " + fn_name)));
            ++rows;
        }
    LAV_CHECK_AS(UsageError, rows > 0, "--provider ", module,
                 " has no function named <variant>_<family> (e.g. chunk_simple_gla) for a family "
                 "of this build");
    return loaded;
}

}  // namespace lav::providers

// ---- Python prologues ----

namespace lav::providers {
namespace {

// Where the user's code stands: "file.py:line" of the innermost frame outside torch and lav,
// kept per code object and line. Code objects are held, so that their addresses stay theirs.
struct Sites {
    std::vector<std::string> skipped;  // folders whose frames are not the user's
    std::unordered_map<PyCodeObject*, std::string> files;  // "" for a skipped file
    std::map<std::pair<PyCodeObject*, int>, std::string> places;
};
Sites* sites = nullptr;  // made with the first Python prologue; read under the GIL

const char* site_of(PyCodeObject* code, int line) {
    auto file = sites->files.find(code);
    if (file == sites->files.end()) {
        Py_INCREF(code);
        const char* path = PyUnicode_AsUTF8(code->co_filename);
        std::string shown = path ? path : "<unknown>";
        bool skip = shown.empty() || shown[0] == '<';
        for (const std::string& dir : sites->skipped) skip = skip || shown.rfind(dir, 0) == 0;
        if (skip)
            shown.clear();
        else
            shown = std::filesystem::path(shown).filename().string();
        file = sites->files.emplace(code, std::move(shown)).first;
    }
    if (file->second.empty()) return nullptr;
    auto place = sites->places.try_emplace({code, line}).first;
    if (place->second.empty()) place->second = file->second + ":" + std::to_string(line);
    return place->second.c_str();
}

// Trace::SiteSource for ops the prologue's function calls. torch's bindings let go of the GIL
// while an op runs, so it is taken again to read the calling thread's frames.
const char* python_site() {
    const PyGILState_STATE gil = PyGILState_Ensure();
    const char* site = nullptr;
    PyFrameObject* frame = PyEval_GetFrame();  // borrowed
    Py_XINCREF(frame);
    while (frame != nullptr && site == nullptr) {
        PyCodeObject* code = PyFrame_GetCode(frame);
        site = site_of(code, PyFrame_GetLineNumber(frame));
        Py_DECREF(code);
        PyFrameObject* back = PyFrame_GetBack(frame);
        Py_DECREF(frame);
        frame = back;
    }
    Py_XDECREF(frame);
    PyGILState_Release(gil);
    return site;
}

}  // namespace

harness::TensorMap run_python_prologue(const scenario::Prologue& prologue,
                                       const harness::TensorMap& env,
                                       const harness::PrologueHooks& hooks) {
    const scenario::PythonFunction& fn = *prologue.python;
    const auto fail = [&](const std::string& message) {
        throw ScenarioError(
            harness::prologue_diagnostic(prologue, fn.span, message, python_error()));
    };
    start_interpreter();
    const Gil gil;
    Ref shim(PyImport_ImportModule("lav._prologue_call"));
    LAV_CHECK_AS(EnvironmentError, shim, "cannot import lav's Python package from ",
                 LAV_PYTHON_PACKAGE_DIR, ": ", python_error());
    if (sites == nullptr) {
        sites = new Sites();  // lives as long as the interpreter: the process
        Ref dirs(PyObject_CallMethod(shim.get(), "skipped_dirs", nullptr));
        if (!dirs) fail("cannot find torch's folder");
        for (Py_ssize_t i = 0; i < PyList_Size(dirs.get()); ++i)
            sites->skipped.push_back(text_of(PyList_GetItem(dirs.get(), i)));
    }
    Ref sizes = checked(PyDict_New(), "dict");
    for (const auto& [name, size] : fn.sizes)
        PyDict_SetItemString(sizes.get(), name.c_str(), Ref(PyLong_FromLongLong(size)).get());

    Ref prepared;
    {
        // loading the file and building the module are not the prologue's ops
        at::DisableRecordFunctionGuard untraced;
        prepared =
            Ref(PyObject_CallMethod(shim.get(), "prepare", "ssOOK", fn.file.c_str(),
                                    fn.function.c_str(), tensor_dict(env, dlpack_capsule).get(),
                                    sizes.get(), static_cast<unsigned long long>(fn.seed)));
    }
    if (!prepared) fail("cannot call " + fn.function + "()");
    PyObject* call = PyTuple_GetItem(prepared.get(), 0);
    PyObject* inputs = PyTuple_GetItem(prepared.get(), 1);
    PyObject* owned = PyTuple_GetItem(prepared.get(), 2);
    for (Py_ssize_t i = 0; i < PyList_Size(inputs); ++i) {
        PyObject* item = PyList_GetItem(inputs, i);
        if (hooks.on_input)
            hooks.on_input(text_of(PyTuple_GetItem(item, 0)),
                           same_tensor(PyTuple_GetItem(item, 1)));
    }
    for (Py_ssize_t i = 0; i < PyList_Size(owned); ++i) {
        PyObject* item = PyList_GetItem(owned, i);
        if (hooks.on_parameter)
            hooks.on_parameter(text_of(PyTuple_GetItem(item, 0)),
                               same_tensor(PyTuple_GetItem(item, 1)),
                               PyObject_IsTrue(PyTuple_GetItem(item, 2)) == 1);
    }

    if (hooks.on_site_source) hooks.on_site_source(&python_site);
    Ref out(PyObject_CallMethod(shim.get(), "run", "(O)", call));
    if (hooks.on_site_source) hooks.on_site_source(nullptr);
    if (!out) fail(fn.function + "() raised");

    harness::TensorMap assigned;
    at::DisableRecordFunctionGuard untraced;
    Ref results(PyObject_CallMethod(shim.get(), "results", "OO", call, out.get()));
    if (!results) fail(fn.function + "() returned what lav cannot take");
    for (Py_ssize_t i = 0; i < PyList_Size(results.get()); ++i) {
        PyObject* item = PyList_GetItem(results.get(), i);
        assigned[text_of(PyTuple_GetItem(item, 0))] = same_tensor(PyTuple_GetItem(item, 2));
    }
    return assigned;
}

}  // namespace lav::providers
