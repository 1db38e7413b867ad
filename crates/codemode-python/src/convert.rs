//! JSON ⇄ Python, strictly: only what JSON can say crosses. `dict` (with `str` keys), `list`,
//! `tuple`, `str`, `int` (64-bit), finite `float`, `bool` and `None` convert; anything else — a
//! `set`, `bytes`, `NaN`, a `datetime`, a custom object, a cycle, nesting past [`MAX_DEPTH`] — is
//! an error naming where in the value it sits (`$.rows[2].when: object of type 'datetime' is not
//! JSON`). Nothing is converted silently (NaN to null, a set to a list), so a tool's result means
//! the same on both sides of the bridge.

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};
use serde_json::{Map, Number, Value};
use std::collections::HashSet;

/// Deepest nesting converted. Prevents: a deeply nested (or self-referencing through fresh
/// objects) value exhausting the converting thread's stack.
pub const MAX_DEPTH: usize = 256;

/// A JSON value as a new Python object.
pub fn to_py<'py>(py: Python<'py>, v: &Value) -> PyResult<Bound<'py, PyAny>> {
    Ok(match v {
        Value::Null => py.None().into_bound(py),
        Value::Bool(b) => PyBool::new(py, *b).to_owned().into_any(),
        Value::Number(n) => match (n.as_i64(), n.as_u64(), n.as_f64()) {
            (Some(i), _, _) => i.into_pyobject(py)?.into_any(),
            (None, Some(u), _) => u.into_pyobject(py)?.into_any(),
            (None, None, f) => PyFloat::new(py, f.unwrap_or(0.0)).into_any(),
        },
        Value::String(s) => PyString::new(py, s).into_any(),
        Value::Array(items) => {
            let list = PyList::empty(py);
            for item in items {
                list.append(to_py(py, item)?)?;
            }
            list.into_any()
        }
        Value::Object(map) => {
            let dict = PyDict::new(py);
            for (k, item) in map {
                dict.set_item(k, to_py(py, item)?)?;
            }
            dict.into_any()
        }
    })
}

/// A Python value as JSON, or a `TypeError` / `ValueError` naming the first part that is not JSON.
pub fn from_py(obj: &Bound<'_, PyAny>) -> PyResult<Value> {
    let mut on_path = HashSet::new();
    let mut path = String::from("$");
    convert(obj, &mut on_path, 0, &mut path)
}

fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type().qualname().map(|n| n.to_string()).unwrap_or_else(|_| "?".into())
}

fn convert(obj: &Bound<'_, PyAny>, on_path: &mut HashSet<usize>, depth: usize, path: &mut String) -> PyResult<Value> {
    if depth > MAX_DEPTH {
        return Err(PyValueError::new_err(format!("{path}: nested deeper than {MAX_DEPTH} levels")));
    }
    if obj.is_none() {
        return Ok(Value::Null);
    }
    // `bool` before `int`: bool is a subclass of int.
    if let Ok(b) = obj.cast_exact::<PyBool>() {
        return Ok(Value::Bool(b.is_true()));
    }
    if obj.is_instance_of::<PyInt>() {
        if let Ok(i) = obj.extract::<i64>() {
            return Ok(Value::from(i));
        }
        if let Ok(u) = obj.extract::<u64>() {
            return Ok(Value::from(u));
        }
        return Err(PyValueError::new_err(format!("{path}: integer out of the 64-bit range is not JSON")));
    }
    if let Ok(f) = obj.cast::<PyFloat>() {
        let x = f.value();
        return Number::from_f64(x)
            .map(Value::Number)
            .ok_or_else(|| PyValueError::new_err(format!("{path}: {x} is not JSON (only finite numbers are)")));
    }
    if let Ok(s) = obj.cast::<PyString>() {
        return Ok(Value::String(s.to_str()?.to_owned()));
    }
    let is_dict = obj.is_instance_of::<PyDict>();
    let is_seq = obj.is_instance_of::<PyList>() || obj.is_instance_of::<PyTuple>();
    if !is_dict && !is_seq {
        return Err(PyTypeError::new_err(format!("{path}: object of type '{}' is not JSON", type_name(obj))));
    }
    let id = obj.as_ptr() as usize;
    if !on_path.insert(id) {
        return Err(PyValueError::new_err(format!("{path}: circular reference (a value contains itself)")));
    }
    let base = path.len();
    let out = if is_dict {
        let dict = obj.cast::<PyDict>()?;
        let mut map = Map::new();
        let mut result = Ok(());
        for (k, v) in dict.iter() {
            let Ok(key) = k.cast::<PyString>() else {
                result = Err(PyTypeError::new_err(format!(
                    "{path}: dict key of type '{}' is not JSON (keys must be str)",
                    type_name(&k)
                )));
                break;
            };
            let key = key.to_str()?.to_owned();
            path.truncate(base);
            path.push('.');
            path.push_str(&key);
            match convert(&v, on_path, depth + 1, path) {
                Ok(value) => {
                    map.insert(key, value);
                }
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
        }
        result.map(|()| Value::Object(map))
    } else {
        let mut items = Vec::new();
        let mut result = Ok(());
        for (i, item) in obj.try_iter()?.enumerate() {
            path.truncate(base);
            path.push_str(&format!("[{i}]"));
            match item.and_then(|item| convert(&item, on_path, depth + 1, path)) {
                Ok(v) => items.push(v),
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
        }
        result.map(|()| Value::Array(items))
    };
    if out.is_ok() {
        path.truncate(base);
    }
    on_path.remove(&id);
    out
}

/// A JSON value that becomes a Python object when a future resolves (the output of an awaitable).
pub struct Json(pub Value);

impl<'py> IntoPyObject<'py> for Json {
    type Target = PyAny;
    type Output = Bound<'py, PyAny>;
    type Error = PyErr;

    fn into_pyobject(self, py: Python<'py>) -> Result<Self::Output, Self::Error> {
        to_py(py, &self.0)
    }
}
