//! The C types the native evaluator prints, read from DWARF (typedefs and `const`/
//! `volatile` seen through), and the steps of an expression applied to a value in memory:
//! `.member`, `->member`, `[n]`, `*`.

use gimli::{AttributeValue, constants as dw};

use super::debug::{Debug, DieRef, attr_ref, has};
use super::expr::Step;
use super::{NotNative, Process};

/// A member of a struct or union.
#[derive(Debug, Clone)]
pub(super) struct Member {
    pub(super) name: String,
    pub(super) offset: u64,
    pub(super) ty: DieRef,
}

/// A type, as far as printing needs it.
#[derive(Debug, Clone)]
pub(super) enum Type {
    /// An integer: `text` for the 1-byte character types (`65 'A'`), `boolean` for `_Bool`.
    Int {
        size: u64,
        signed: bool,
        text: bool,
        boolean: bool,
    },
    /// `float` (4 bytes) or `double` (8).
    Float { size: u64 },
    /// An enumeration: its enumerators' (value, name), values as raw bits of `size` bytes.
    Enum {
        size: u64,
        signed: bool,
        values: Vec<(u64, String)>,
    },
    /// A data pointer (`None`: `void *`).
    Pointer(Option<DieRef>),
    /// A struct or union.
    Struct { size: u64, members: Vec<Member> },
    /// An array of `dims` (outermost first) of `elem`.
    Array { elem: DieRef, dims: Vec<u64> },
}

/// A value in the process's memory.
#[derive(Debug, Clone)]
pub(super) struct Value {
    pub(super) addr: u64,
    pub(super) ty: Type,
}

impl Debug {
    /// The type of DIE `r`, through typedefs and qualifiers.
    pub(super) fn resolve(&self, mut r: DieRef) -> Result<Type, NotNative> {
        for _ in 0..64 {
            let e = self.entry(r)?;
            let size = match e.attr_value(dw::DW_AT_byte_size) {
                Ok(Some(v)) => v.udata_value(),
                _ => None,
            };
            let next = attr_ref(&e, dw::DW_AT_type).map(|offset| DieRef { offset, ..r });
            match e.tag() {
                // gdb prints these as wide characters (`65 L'A'`, `L"…"`): not done here.
                dw::DW_TAG_typedef
                    if self.name_of(&self.units[r.unit].unit, &e).is_some_and(|n| {
                        matches!(n.as_str(), "wchar_t" | "char16_t" | "char32_t")
                    }) =>
                {
                    return Err(NotNative::Type);
                }
                dw::DW_TAG_typedef
                | dw::DW_TAG_const_type
                | dw::DW_TAG_volatile_type
                | dw::DW_TAG_restrict_type => r = next.ok_or(NotNative::Type)?,
                dw::DW_TAG_base_type => return base(&e, size.ok_or(NotNative::Type)?),
                dw::DW_TAG_pointer_type => {
                    if size != Some(8) {
                        return Err(NotNative::Type);
                    }
                    return Ok(Type::Pointer(next));
                }
                dw::DW_TAG_enumeration_type => return self.enumeration(r, size),
                dw::DW_TAG_structure_type | dw::DW_TAG_union_type => {
                    return self.structure(r, size);
                }
                dw::DW_TAG_array_type => {
                    return self.array(r, next.ok_or(NotNative::Type)?);
                }
                _ => return Err(NotNative::Type),
            }
        }
        Err(NotNative::Type)
    }

    fn enumeration(&self, r: DieRef, size: Option<u64>) -> Result<Type, NotNative> {
        let size = size
            .filter(|s| matches!(s, 1 | 2 | 4 | 8))
            .ok_or(NotNative::Type)?;
        let e = self.entry(r)?;
        let under = attr_ref(&e, dw::DW_AT_type).map(|offset| DieRef { offset, ..r });
        let mut signed_values = false;
        let mut values = Vec::new();
        let unit = &self.units[r.unit].unit;
        let mut tree = unit
            .entries_tree(Some(r.offset))
            .map_err(|_| NotNative::Type)?;
        let root = tree.root().map_err(|_| NotNative::Type)?;
        let mut children = root.children();
        while let Some(c) = children.next().map_err(|_| NotNative::Type)? {
            let c = c.entry();
            if c.tag() != dw::DW_TAG_enumerator {
                continue;
            }
            let name = self.name_of(unit, c).ok_or(NotNative::Type)?;
            let v = match c.attr_value(dw::DW_AT_const_value) {
                Ok(Some(AttributeValue::Sdata(v))) => {
                    signed_values |= v < 0;
                    v as u64
                }
                Ok(Some(v)) => v.udata_value().ok_or(NotNative::Type)?,
                _ => return Err(NotNative::Type),
            };
            values.push((v & mask(size), name));
        }
        let signed = match under.map(|u| self.resolve(u)) {
            Some(Ok(Type::Int { signed, .. })) => signed,
            _ => signed_values,
        };
        Ok(Type::Enum {
            size,
            signed,
            values,
        })
    }

    fn structure(&self, r: DieRef, size: Option<u64>) -> Result<Type, NotNative> {
        let e = self.entry(r)?;
        if has(&e, dw::DW_AT_declaration) {
            return Err(NotNative::Type);
        }
        let size = size.ok_or(NotNative::Type)?;
        let unit = &self.units[r.unit].unit;
        let mut tree = unit
            .entries_tree(Some(r.offset))
            .map_err(|_| NotNative::Type)?;
        let root = tree.root().map_err(|_| NotNative::Type)?;
        let mut children = root.children();
        let mut members = Vec::new();
        while let Some(c) = children.next().map_err(|_| NotNative::Type)? {
            let c = c.entry();
            match c.tag() {
                dw::DW_TAG_member => {}
                // C++ (bases, methods) and anything else: gdb's forms, not done here.
                _ => return Err(NotNative::Type),
            }
            if has(c, dw::DW_AT_bit_size) || has(c, dw::DW_AT_data_bit_offset) {
                return Err(NotNative::Type);
            }
            // An unnamed member (an anonymous struct or union) prints without a name.
            let name = self.name_of(unit, c).ok_or(NotNative::Type)?;
            let offset = match c.attr_value(dw::DW_AT_data_member_location) {
                Ok(Some(v)) => v.udata_value().ok_or(NotNative::Type)?,
                Ok(None) => 0,
                Err(_) => return Err(NotNative::Type),
            };
            let ty = attr_ref(c, dw::DW_AT_type).ok_or(NotNative::Type)?;
            members.push(Member {
                name,
                offset,
                ty: DieRef { offset: ty, ..r },
            });
        }
        Ok(Type::Struct { size, members })
    }

    fn array(&self, r: DieRef, elem: DieRef) -> Result<Type, NotNative> {
        let unit = &self.units[r.unit].unit;
        let mut tree = unit
            .entries_tree(Some(r.offset))
            .map_err(|_| NotNative::Type)?;
        let root = tree.root().map_err(|_| NotNative::Type)?;
        let mut children = root.children();
        let mut dims = Vec::new();
        while let Some(c) = children.next().map_err(|_| NotNative::Type)? {
            let c = c.entry();
            if c.tag() != dw::DW_TAG_subrange_type {
                return Err(NotNative::Type);
            }
            let get = |at| match c.attr_value(at) {
                Ok(Some(v)) => v.udata_value(),
                _ => None,
            };
            if get(dw::DW_AT_lower_bound).is_some_and(|l| l != 0) {
                return Err(NotNative::Type);
            }
            // Flexible or variable-length arrays: gdb's forms, not done here.
            let n = match (get(dw::DW_AT_count), get(dw::DW_AT_upper_bound)) {
                (Some(n), _) => n,
                (None, Some(u)) => u + 1,
                _ => return Err(NotNative::Type),
            };
            if n == 0 {
                return Err(NotNative::Type);
            }
            dims.push(n);
        }
        if dims.is_empty() {
            return Err(NotNative::Type);
        }
        Ok(Type::Array { elem, dims })
    }

    /// The size of a value of type `t` in bytes.
    pub(super) fn size_of(&self, t: &Type) -> Result<u64, NotNative> {
        Ok(match t {
            Type::Int { size, .. }
            | Type::Float { size }
            | Type::Enum { size, .. }
            | Type::Struct { size, .. } => *size,
            Type::Pointer(_) => 8,
            Type::Array { elem, dims } => {
                let one = self.size_of(&self.resolve(*elem)?)?;
                dims.iter()
                    .try_fold(one, |a, d| a.checked_mul(*d))
                    .ok_or(NotNative::Type)?
            }
        })
    }

    /// Element `i`'s value of array `v` (any index, as C addresses it).
    pub(super) fn element(&self, v: &Value, i: i64) -> Result<Value, NotNative> {
        let Type::Array { elem, dims } = &v.ty else {
            return Err(NotNative::Error);
        };
        let ty = if dims.len() > 1 {
            Type::Array {
                elem: *elem,
                dims: dims[1..].to_vec(),
            }
        } else {
            self.resolve(*elem)?
        };
        let size = self.size_of(&ty)?;
        Ok(Value {
            addr: v.addr.wrapping_add((i as u64).wrapping_mul(size)),
            ty,
        })
    }

    /// Applies the expression's steps to `v`.
    pub(super) fn apply(
        &self,
        mut v: Value,
        steps: &[Step],
        p: &Process,
    ) -> Result<Value, NotNative> {
        for s in steps {
            v = match s {
                Step::Member(m) => self.member(&v, m)?,
                Step::Arrow(m) => self.member(&self.deref(&v, p)?, m)?,
                Step::Index(i) => match &v.ty {
                    Type::Array { .. } => self.element(&v, *i)?,
                    Type::Pointer(Some(t)) => {
                        let base = self.deref(&v, p)?;
                        let size = self.size_of(&base.ty)?;
                        let ty = self.resolve(*t)?;
                        Value {
                            addr: base.addr.wrapping_add((*i as u64).wrapping_mul(size)),
                            ty,
                        }
                    }
                    _ => return Err(NotNative::Error),
                },
                Step::Deref => match &v.ty {
                    Type::Array { .. } => self.element(&v, 0)?,
                    _ => self.deref(&v, p)?,
                },
            };
        }
        Ok(v)
    }

    /// What pointer `v` points to.
    fn deref(&self, v: &Value, p: &Process) -> Result<Value, NotNative> {
        let Type::Pointer(Some(t)) = &v.ty else {
            return Err(NotNative::Error);
        };
        let bytes = p.read(v.addr, 8)?;
        let addr = u64::from_le_bytes(bytes.try_into().map_err(|_| NotNative::Error)?);
        Ok(Value {
            addr,
            ty: self.resolve(*t)?,
        })
    }

    fn member(&self, v: &Value, name: &str) -> Result<Value, NotNative> {
        let Type::Struct { members, .. } = &v.ty else {
            return Err(NotNative::Error);
        };
        let m = members
            .iter()
            .find(|m| m.name == name)
            .ok_or(NotNative::Error)?;
        Ok(Value {
            addr: v.addr.wrapping_add(m.offset),
            ty: self.resolve(m.ty)?,
        })
    }
}

/// A base type: integers, characters, `_Bool`, `float` and `double` (the rest: not done).
fn base(
    e: &gimli::DebuggingInformationEntry<'_, '_, super::debug::R>,
    size: u64,
) -> Result<Type, NotNative> {
    let Ok(Some(AttributeValue::Encoding(enc))) = e.attr_value(dw::DW_AT_encoding) else {
        return Err(NotNative::Type);
    };
    if enc == dw::DW_ATE_float && matches!(size, 4 | 8) {
        return Ok(Type::Float { size });
    }
    if !matches!(size, 1 | 2 | 4 | 8) {
        return Err(NotNative::Type);
    }
    let (signed, text, boolean) = match enc {
        dw::DW_ATE_signed => (true, false, false),
        dw::DW_ATE_unsigned => (false, false, false),
        dw::DW_ATE_signed_char => (true, true, false),
        dw::DW_ATE_unsigned_char => (false, true, false),
        dw::DW_ATE_boolean => (false, false, true),
        _ => return Err(NotNative::Type),
    };
    // A 1-byte integer not marked as a character, or a wide character: not done.
    if text != (size == 1) && !boolean {
        return Err(NotNative::Type);
    }
    Ok(Type::Int {
        size,
        signed,
        text,
        boolean,
    })
}

/// The low `size` bytes.
pub(super) fn mask(size: u64) -> u64 {
    if size >= 8 {
        u64::MAX
    } else {
        (1 << (size * 8)) - 1
    }
}
