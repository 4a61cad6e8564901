//! Kernel facts the eBPF programs cannot learn themselves: Rust eBPF has no CO-RE relocations,
//! so the `task_struct` field offsets come from the running kernel's BTF here and are handed
//! to the programs as load-time globals.

use std::path::Path;

use btf_rs::{Btf, Type};
use thiserror::Error;

#[derive(Debug, Error)]
pub enum KernelError {
    #[error("cannot read kernel BTF from {path}: {message}")]
    Btf { path: String, message: String },
    #[error("kernel BTF has no `struct {0}`")]
    NoStruct(&'static str),
    #[error("kernel BTF has no field `{field}` in `struct {ty}`")]
    NoField {
        ty: &'static str,
        field: &'static str,
    },
}

/// Byte offsets of the `task_struct` fields the programs read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TaskOffsets {
    pub pid: u32,
    pub tgid: u32,
    pub comm: u32,
    pub state: u32,
    /// `se.sum_exec_runtime`.
    pub exec: u32,
}

pub fn task_offsets(btf_path: &Path) -> Result<TaskOffsets, KernelError> {
    let btf = Btf::from_file(btf_path).map_err(|e| KernelError::Btf {
        path: btf_path.display().to_string(),
        message: e.to_string(),
    })?;
    let task = find_struct(&btf, "task_struct")?;
    let field = |name: &'static str| {
        member_offset(&btf, &task, name)
            .map(|(off, _)| off)
            .ok_or(KernelError::NoField {
                ty: "task_struct",
                field: name,
            })
    };
    let exec = {
        let missing = KernelError::NoField {
            ty: "task_struct",
            field: "se.sum_exec_runtime",
        };
        let (se_off, se) = member_offset(&btf, &task, "se").ok_or(KernelError::NoField {
            ty: "task_struct",
            field: "se",
        })?;
        let Ok(Type::Struct(entity)) = btf.resolve_chained_type(&se) else {
            return Err(missing);
        };
        let (off, _) = member_offset(&btf, &entity, "sum_exec_runtime").ok_or(missing)?;
        se_off + off
    };
    Ok(TaskOffsets {
        pid: field("pid")?,
        tgid: field("tgid")?,
        comm: field("comm")?,
        // Renamed from `state` in 5.14.
        state: field("__state").or_else(|_| field("state"))?,
        exec,
    })
}

fn find_struct(btf: &Btf, name: &'static str) -> Result<btf_rs::Struct, KernelError> {
    btf.resolve_types_by_name(name)
        .map_err(|_| KernelError::NoStruct(name))?
        .into_iter()
        .find_map(|t| match t {
            // A forward declaration has no members; the definition is the one with some.
            Type::Struct(s) if !s.members.is_empty() => Some(s),
            _ => None,
        })
        .ok_or(KernelError::NoStruct(name))
}

/// Byte offset of member `name` in `st` and the member itself, looking through anonymous
/// struct/union members, where the kernel keeps many task_struct fields.
fn member_offset(btf: &Btf, st: &btf_rs::Struct, name: &str) -> Option<(u32, btf_rs::Member)> {
    for member in &st.members {
        let member_name = btf.resolve_name(member).unwrap_or_default();
        if member_name == name {
            return Some((member.bit_offset() / 8, member.clone()));
        }
        if member_name.is_empty() {
            let inner = match btf.resolve_chained_type(member).ok()? {
                Type::Struct(s) | Type::Union(s) => s,
                _ => continue,
            };
            if let Some((off, m)) = member_offset(btf, &inner, name) {
                return Some((member.bit_offset() / 8 + off, m));
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn running_kernel_task_struct_offsets_are_plausible() {
        let path = Path::new(crate::preflight::VMLINUX_BTF);
        if !path.exists() {
            eprintln!("skipping: {} is missing on this machine", path.display());
            return;
        }
        let off = task_offsets(path).unwrap();
        // pid and tgid are adjacent pid_t fields in every kernel since 2.6.
        assert_eq!(off.tgid, off.pid + 4);
        assert!(off.comm > off.tgid, "{off:?}");
        assert!(off.state < off.pid, "{off:?}");
        assert!(
            off.exec > off.state && off.exec.is_multiple_of(8),
            "{off:?}"
        );
    }
}
