//! Where a variable lives: its DWARF location expression evaluated with gimli against the
//! innermost frame (its registers, its canonical frame address, the function's frame base)
//! and the process's memory; static addresses are moved by the file's load bias. Only a
//! single address in memory is native: registers, pieces and location lists go to gdb.

use gimli::{AttributeValue, EvaluationResult, Location, constants as dw};

use super::debug::{Debug, DieRef, R};
use super::{NotNative, Process};

/// The frame a variable is read in.
pub(super) struct Frame<'a> {
    pub(super) debug: &'a Debug,
    pub(super) process: &'a Process<'a>,
    /// The function holding the variable (for its frame base), if it is a local.
    pub(super) function: Option<DieRef>,
}

impl Frame<'_> {
    /// The address of variable `var`.
    pub(super) fn address_of(&self, var: DieRef) -> Result<u64, NotNative> {
        let expr = self.expression(var, dw::DW_AT_location)?;
        self.evaluate(var.unit, expr, true)
    }

    /// The location expression in attribute `at` of DIE `r` (not a location list).
    fn expression(&self, r: DieRef, at: gimli::DwAt) -> Result<gimli::Expression<R>, NotNative> {
        let e = self.debug.entry(r)?;
        match e.attr_value(at) {
            Ok(Some(AttributeValue::Exprloc(x))) => Ok(x),
            Ok(Some(AttributeValue::Block(b))) => Ok(gimli::Expression(b)),
            _ => Err(NotNative::Location),
        }
    }

    /// Evaluates `expr` of unit `unit`: the memory address it names (`want_address`) or
    /// the value it computes (a frame base).
    fn evaluate(
        &self,
        unit: usize,
        expr: gimli::Expression<R>,
        want_address: bool,
    ) -> Result<u64, NotNative> {
        let p = self.process;
        let encoding = self.debug.units[unit].unit.encoding();
        let mut eval = expr.evaluation(encoding);
        let fail = |_: gimli::Error| NotNative::Location;
        let mut state = eval.evaluate().map_err(fail)?;
        for _ in 0..256 {
            state = match state {
                EvaluationResult::Complete => break,
                EvaluationResult::RequiresMemory { address, size, .. } => {
                    let b = p.read(address, u64::from(size))?;
                    let mut w = [0u8; 8];
                    w[..b.len()].copy_from_slice(&b);
                    eval.resume_with_memory(gimli::Value::Generic(u64::from_le_bytes(w)))
                        .map_err(fail)?
                }
                EvaluationResult::RequiresRegister { register, .. } => {
                    let v = *p.regs.get(register.0 as usize).ok_or(NotNative::Location)?;
                    eval.resume_with_register(gimli::Value::Generic(v))
                        .map_err(fail)?
                }
                EvaluationResult::RequiresFrameBase => {
                    let base = self.frame_base()?;
                    eval.resume_with_frame_base(base).map_err(fail)?
                }
                EvaluationResult::RequiresCallFrameCfa => {
                    let cfa = p.cfa.ok_or(NotNative::Location)?;
                    eval.resume_with_call_frame_cfa(cfa).map_err(fail)?
                }
                EvaluationResult::RequiresRelocatedAddress(a) => {
                    let bias = p.files[p.exe].bias;
                    eval.resume_with_relocated_address(a.wrapping_add(bias))
                        .map_err(fail)?
                }
                // Thread-local storage, entry values, typed stacks: gdb's.
                _ => return Err(NotNative::Location),
            };
        }
        let pieces = eval.result();
        match pieces.as_slice() {
            [piece] if piece.size_in_bits.is_none() => match piece.location {
                Location::Address { address } if want_address => Ok(address),
                Location::Address { address } => Ok(address),
                Location::Value {
                    value: gimli::Value::Generic(v),
                } if !want_address => Ok(v),
                Location::Register { register } if !want_address => p
                    .regs
                    .get(register.0 as usize)
                    .copied()
                    .ok_or(NotNative::Location),
                _ => Err(NotNative::Location),
            },
            _ => Err(NotNative::Location),
        }
    }

    /// The frame base of the function holding the variable (`DW_AT_frame_base`).
    fn frame_base(&self) -> Result<u64, NotNative> {
        let f = self.function.ok_or(NotNative::Location)?;
        let expr = self.expression(f, dw::DW_AT_frame_base)?;
        self.evaluate(f.unit, expr, false)
    }
}
