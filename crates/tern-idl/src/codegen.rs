//! The Rust back end: one struct per message implementing [`tern_wire::tlv::Message`].

use std::fmt::Write;

use crate::{FieldSchema, FieldType, MessageSchema, Schema};

const KEYWORDS: &[&str] = &[
    "as", "break", "const", "continue", "else", "enum", "extern", "false", "fn", "for", "if", "impl", "in", "let",
    "loop", "match", "mod", "move", "mut", "pub", "ref", "return", "static", "struct", "trait", "true", "type",
    "unsafe", "use", "where", "while", "async", "await", "dyn", "abstract", "become", "box", "do", "final", "macro",
    "override", "priv", "typeof", "unsized", "virtual", "yield", "try", "gen",
];

fn ident(name: &str) -> String {
    match name {
        "self" | "Self" | "super" | "crate" => format!("{name}_"),
        n if KEYWORDS.contains(&n) => format!("r#{n}"),
        n => n.to_string(),
    }
}

fn rust_type(ty: FieldType) -> &'static str {
    match ty {
        FieldType::Int32 => "i32",
        FieldType::Int64 => "i64",
        FieldType::Uint32 => "u32",
        FieldType::Uint64 => "u64",
        FieldType::Bool => "bool",
        FieldType::Float => "f32",
        FieldType::Double => "f64",
        FieldType::String => "::std::string::String",
        FieldType::Bytes => "::std::vec::Vec<u8>",
    }
}

fn len_expr(f: &FieldSchema) -> String {
    let name = ident(&f.name);
    match f.ty.fixed_len() {
        Some(n) => format!("{}", 3 + n),
        None => format!("::tern_wire::tlv::bytes_field_len(self.{name}.len())"),
    }
}

fn put_stmt(f: &FieldSchema) -> String {
    let (n, name) = (f.number, ident(&f.name));
    match f.ty {
        FieldType::Int32 => format!("w.put_u32({n}, self.{name} as u32);"),
        FieldType::Int64 => format!("w.put_u64({n}, self.{name} as u64);"),
        FieldType::Uint32 => format!("w.put_u32({n}, self.{name});"),
        FieldType::Uint64 => format!("w.put_u64({n}, self.{name});"),
        FieldType::Bool => format!("w.put_bool({n}, self.{name});"),
        FieldType::Float => format!("w.put_u32({n}, self.{name}.to_bits());"),
        FieldType::Double => format!("w.put_u64({n}, self.{name}.to_bits());"),
        FieldType::String => format!("w.put_bytes({n}, self.{name}.as_bytes());"),
        FieldType::Bytes => format!("w.put_bytes({n}, &self.{name});"),
    }
}

fn decode_arm(f: &FieldSchema) -> String {
    let n = f.number;
    let var = format!("f_{n}");
    let value = match f.ty {
        FieldType::String | FieldType::Bytes => {
            return format!("{n} => {var}.extend_from_slice(r.value),");
        }
        FieldType::Int32 => format!("::tern_wire::tlv::get_u32({n}, r.value)? as i32"),
        FieldType::Int64 => format!("::tern_wire::tlv::get_u64({n}, r.value)? as i64"),
        FieldType::Uint32 => format!("::tern_wire::tlv::get_u32({n}, r.value)?"),
        FieldType::Uint64 => format!("::tern_wire::tlv::get_u64({n}, r.value)?"),
        FieldType::Bool => format!("::tern_wire::tlv::get_bool({n}, r.value)?"),
        FieldType::Float => format!("f32::from_bits(::tern_wire::tlv::get_u32({n}, r.value)?)"),
        FieldType::Double => format!("f64::from_bits(::tern_wire::tlv::get_u64({n}, r.value)?)"),
    };
    format!(
        "{n} => {{ if {var}.is_some() {{ return ::core::result::Result::Err(\
         ::tern_wire::tlv::DecodeError::DuplicateField {{ field: {n} }}); }} {var} = ::core::option::Option::Some({value}); }}"
    )
}

fn message(out: &mut String, m: &MessageSchema, file: &str) {
    let name = ident(&m.name);
    let dispatch: Vec<String> = m.dispatch_fields().iter().map(u8::to_string).collect();
    let _ = writeln!(out, "/// Message `{}` of `{file}`.", m.name);
    let _ = writeln!(out, "#[derive(Debug, Clone, PartialEq, Default)]");
    let _ = writeln!(out, "pub struct {name} {{");
    for f in &m.fields {
        let mark = if f.dispatch { ", dispatch" } else { "" };
        let _ = writeln!(out, "    /// `{} {} = {}`{mark}.", f.ty.proto_name(), f.name, f.number);
        let _ = writeln!(out, "    pub {}: {},", ident(&f.name), rust_type(f.ty));
    }
    let _ = writeln!(out, "}}\n");
    let _ = writeln!(out, "impl ::tern_wire::tlv::Message for {name} {{");
    let _ = writeln!(out, "    const NAME: &'static str = {:?};", m.name);
    let _ = writeln!(out, "    const DISPATCH_FIELDS: &'static [u8] = &[{}];", dispatch.join(", "));
    let sum = |fs: Vec<&FieldSchema>| {
        if fs.is_empty() { "0".to_string() } else { fs.into_iter().map(len_expr).collect::<Vec<_>>().join(" + ") }
    };
    let _ = writeln!(out, "    #[inline]\n    fn encoded_len(&self) -> usize {{ {} }}", sum(m.fields.iter().collect()));
    let _ = writeln!(
        out,
        "    #[inline]\n    fn dispatch_len(&self) -> usize {{ {} }}",
        sum(m.fields.iter().filter(|f| f.dispatch).collect())
    );
    let _ = writeln!(out, "    #[inline]\n    fn encode(&self, buf: &mut ::std::vec::Vec<u8>) {{");
    if m.fields.is_empty() {
        let _ = writeln!(out, "        let _ = buf;");
    } else {
        let _ = writeln!(out, "        buf.reserve(self.encoded_len());");
        let _ = writeln!(out, "        let mut w = ::tern_wire::tlv::Writer::new(buf);");
        for f in m.encoding_order() {
            let _ = writeln!(out, "        {}", put_stmt(f));
        }
    }
    let _ = writeln!(out, "    }}");
    let _ = writeln!(
        out,
        "    fn decode_parts<'a, I>(parts: I) -> ::core::result::Result<Self, ::tern_wire::tlv::DecodeError>\n    \
         where I: ::core::iter::IntoIterator<Item = &'a [u8]> {{"
    );
    for f in &m.fields {
        let n = f.number;
        match f.ty {
            FieldType::String | FieldType::Bytes => {
                let _ = writeln!(out, "        let mut f_{n}: ::std::vec::Vec<u8> = ::std::vec::Vec::new();");
            }
            ty => {
                let _ = writeln!(
                    out,
                    "        let mut f_{n}: ::core::option::Option<{}> = ::core::option::Option::None;",
                    rust_type(ty)
                );
            }
        }
    }
    let _ = writeln!(out, "        for part in parts {{");
    let _ = writeln!(out, "            for r in ::tern_wire::tlv::Reader::new(part) {{");
    let _ = writeln!(out, "                let r = r?;");
    let _ = writeln!(out, "                match r.field {{");
    for f in &m.fields {
        let _ = writeln!(out, "                    {}", decode_arm(f));
    }
    let _ = writeln!(out, "                    _ => {{}}");
    let _ = writeln!(out, "                }}\n            }}\n        }}");
    let _ = writeln!(out, "        ::core::result::Result::Ok(Self {{");
    for f in &m.fields {
        let n = f.number;
        let field = ident(&f.name);
        let expr = match f.ty {
            FieldType::String => format!(
                "::std::string::String::from_utf8(f_{n}).map_err(|_| ::tern_wire::tlv::DecodeError::InvalidUtf8 {{ field: {n} }})?"
            ),
            FieldType::Bytes => format!("f_{n}"),
            _ => format!("f_{n}.unwrap_or_default()"),
        };
        let _ = writeln!(out, "            {field}: {expr},");
    }
    let _ = writeln!(out, "        }})\n    }}\n}}\n");
}

/// Generates Rust source for every message of `schema`. The code depends only on `tern-wire`.
pub fn generate(schema: &Schema) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "// @generated by tern-idl from `{}`. Do not edit.", schema.file);
    let _ = writeln!(out, "#[allow(clippy::all, unused_mut, unused_variables)]");
    let _ = writeln!(out, "mod __tern_idl_generated {{");
    let _ = writeln!(out, "#![allow(missing_docs, clippy::all, unused_mut, unused_variables)]");
    for m in &schema.messages {
        message(&mut out, m, &schema.file);
    }
    let _ = writeln!(out, "}}");
    let names: Vec<String> = schema.messages.iter().map(|m| ident(&m.name)).collect();
    let _ = writeln!(out, "pub use __tern_idl_generated::{{{}}};", names.join(", "));
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn generated_source_names_every_field() {
        let s = crate::parse_str(
            "g.proto",
            "syntax = \"proto3\"; import \"tern/qingniao.proto\";\n\
             message Req { string type = 1 [(tern.dispatch) = true]; uint64 n = 2; } message Empty {}",
        )
        .unwrap();
        let code = super::generate(&s);
        assert!(code.contains("pub r#type: ::std::string::String"), "{code}");
        assert!(code.contains("const DISPATCH_FIELDS: &'static [u8] = &[1];"), "{code}");
        assert!(code.contains("pub use __tern_idl_generated::{Req, Empty};"), "{code}");
    }
}
