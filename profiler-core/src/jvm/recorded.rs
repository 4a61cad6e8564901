//! A recorded JVM as one byte string: the memory the reader reads, from [`IMAGE_BASE`] on,
//! with libjvm.so's exported variables ([`LIBJVM_VARIABLES`]) in its first words. The fuzz
//! target reads arbitrary bytes as one; the unit tests build two, field by field, as JDK 17
//! and JDK 25 lay them out (the fuzz target's seeds, `fuzz/seeds/jvm/`).

use super::{
    memory::RecordedMemory,
    vmstructs::{LIBJVM_VARIABLES, Libjvm},
};

/// Where a recorded JVM's memory starts in its address space.
pub const IMAGE_BASE: u64 = 0x10_0000;

/// libjvm's symbols and the memory of the recorded JVM `image`: the variable
/// `LIBJVM_VARIABLES[i]` at `IMAGE_BASE + 8 * i`.
pub fn recorded_jvm(image: &[u8]) -> (Libjvm, RecordedMemory) {
    let symbols = LIBJVM_VARIABLES
        .iter()
        .zip((IMAGE_BASE..).step_by(8))
        .map(|(name, at)| (name.to_string(), at))
        .collect();
    (
        Libjvm::from_symbols(symbols),
        RecordedMemory::new(vec![(IMAGE_BASE, image.to_vec())]),
    )
}

#[cfg(test)]
mod tests {
    use std::{path::Path, time::Duration};

    use super::{
        super::{
            codecache::BlobKind,
            debuginfo::{PcScopes, Scope, tests::recorded},
            instance::Jvm,
            memory::Memory,
            unsigned5::{Unsigned5, encode},
            vmstructs::VmStructs,
        },
        *,
    };

    /// Memory from `IMAGE_BASE` on, its first words libjvm's variables.
    struct Image(Vec<u8>);

    impl Image {
        fn new() -> Image {
            Image(vec![0; 8 * LIBJVM_VARIABLES.len()])
        }

        /// The image, to the end of its last page (memory is mapped in pages: a C string is
        /// read up to its page's end).
        fn into_bytes(mut self) -> Vec<u8> {
            self.0.resize(self.0.len().next_multiple_of(4096), 0);
            self.0
        }

        /// `len` zero bytes at a multiple of `align`: their address.
        fn alloc(&mut self, len: usize, align: usize) -> u64 {
            let at = self.0.len().next_multiple_of(align);
            self.0.resize(at + len, 0);
            IMAGE_BASE + at as u64
        }

        fn put(&mut self, addr: u64, value: u64, width: usize) {
            self.put_bytes(addr, &value.to_le_bytes()[..width]);
        }

        fn put_bytes(&mut self, addr: u64, bytes: &[u8]) {
            let at = (addr - IMAGE_BASE) as usize;
            self.0[at..at + bytes.len()].copy_from_slice(bytes);
        }

        fn bytes(&mut self, bytes: &[u8]) -> u64 {
            let at = self.alloc(bytes.len(), 8);
            self.put_bytes(at, bytes);
            at
        }

        fn string(&mut self, s: &str) -> u64 {
            self.bytes(&[s.as_bytes(), &[0]].concat())
        }

        fn var(&mut self, name: &str, value: u64) {
            let i = LIBJVM_VARIABLES.iter().position(|v| *v == name);
            self.put(IMAGE_BASE + 8 * i.expect("a variable") as u64, value, 8);
        }

        /// The variables `prefix` + each name.
        fn vars(&mut self, prefix: &str, values: &[(&str, u64)]) {
            for &(name, value) in values {
                self.var(&format!("{prefix}{name}"), value);
            }
        }

        /// A table of `entries` of `stride` bytes, each `(offset in the entry, value,
        /// width)`, ended by an entry of zeros; its address in `var`.
        fn table(&mut self, var: &str, stride: usize, entries: &[Vec<(u64, u64, usize)>]) {
            let at = self.alloc(stride * (entries.len() + 1), 8);
            for (e, fields) in (at..).step_by(stride).zip(entries) {
                for &(offset, value, width) in fields {
                    self.put(e + offset, value, width);
                }
            }
            self.var(var, at);
        }

        /// A `Method*` of `class` named `name`, with its ConstMethod, constant pool, class
        /// and Symbols, laid out as `FIELDS` says.
        fn method(&mut self, class: &str, name: &str) -> u64 {
            let (class, name) = (self.symbol(class), self.symbol(name));
            let klass = self.alloc(24, 8);
            self.put(klass + 16, class, 8);
            let pool = self.alloc(32 + 2 * 8, 8);
            self.put(pool + 8, klass, 8);
            self.put(pool + 16, 2, 4);
            self.put(pool + 32 + 8, name, 8);
            let const_method = self.alloc(24, 8);
            self.put(const_method + 8, pool, 8);
            self.put(const_method + 16, 1, 2);
            let method = self.alloc(16, 8);
            self.put(method + 8, const_method, 8);
            method
        }

        fn symbol(&mut self, text: &str) -> u64 {
            let at = self.alloc(6 + text.len(), 8);
            self.put(at, text.len() as u64, 2);
            self.put_bytes(at + 6, text.as_bytes());
            at
        }
    }

    #[derive(Clone, Copy, PartialEq, Eq, Debug)]
    enum Jdk {
        /// Code range as pointers, nmethods by name, debug information in the blob.
        J17,
        /// Code range as offsets, nmethods by kind, debug information in the nmethod's
        /// immutable data, metadata in its mutable data.
        J25,
    }

    /// vmStructs' fields as this recorded JVM lays its objects out: (type, field, type
    /// string, offset); `FIELDS_17` and `FIELDS_25` those of one JDK only.
    const FIELDS: [(&str, &str, &str, u64); 26] = [
        ("GrowableArrayBase", "_len", "int", 0),
        ("GrowableArray<int>", "_data", "int*", 8),
        ("CodeHeap", "_memory", "VirtualSpace", 0),
        ("CodeHeap", "_segmap", "VirtualSpace", 16),
        ("CodeHeap", "_log2_segment_size", "int", 40),
        ("VirtualSpace", "_low_boundary", "char*", 0),
        ("VirtualSpace", "_high", "char*", 8),
        ("HeapBlock", "_header", "HeapBlock::Header", 0),
        ("HeapBlock::Header", "_length", "size_t", 0),
        ("HeapBlock::Header", "_used", "bool", 8),
        ("CodeBlob", "_name", "const char*", 0),
        ("CodeBlob", "_size", "int", 8),
        ("CodeBlob", "_frame_size", "int", 16),
        ("nmethod", "_compile_id", "int", 56),
        ("PcDesc", "_pc_offset", "int", 0),
        ("PcDesc", "_scope_decode_offset", "int", 4),
        ("Method", "_constMethod", "ConstMethod*", 8),
        ("ConstMethod", "_constants", "ConstantPool*", 8),
        ("ConstMethod", "_name_index", "u2", 16),
        ("ConstantPool", "_pool_holder", "InstanceKlass*", 8),
        ("ConstantPool", "_length", "int", 16),
        ("Klass", "_name", "Symbol*", 16),
        ("Symbol", "_length", "u2", 0),
        ("Symbol", "_body", "u1[2]", 6),
        ("StubQueue", "_stub_buffer", "address", 0),
        ("StubQueue", "_buffer_limit", "int", 8),
    ];
    const FIELDS_17: [(&str, &str, &str, u64); 8] = [
        ("CodeBlob", "_frame_complete_offset", "int", 12),
        ("CodeBlob", "_code_begin", "address", 24),
        ("CodeBlob", "_code_end", "address", 32),
        ("CompiledMethod", "_method", "Method*", 48),
        ("nmethod", "_metadata_offset", "int", 60),
        ("CompiledMethod", "_scopes_data_begin", "address", 64),
        ("nmethod", "_scopes_pcs_offset", "int", 72),
        ("nmethod", "_dependencies_offset", "int", 76),
    ];
    const FIELDS_25: [(&str, &str, &str, u64); 12] = [
        ("CodeBlob", "_frame_complete_offset", "int16_t", 12),
        ("CodeBlob", "_kind", "u1", 20),
        ("CodeBlob", "_code_offset", "int", 24),
        ("CodeBlob", "_data_offset", "int", 28),
        ("CodeBlob", "_mutable_data", "address", 32),
        ("CodeBlob", "_relocation_size", "int", 40),
        ("CodeBlob", "_mutable_data_size", "int", 44),
        ("nmethod", "_method", "Method*", 48),
        ("nmethod", "_immutable_data", "address", 64),
        ("nmethod", "_immutable_data_size", "int", 72),
        ("nmethod", "_scopes_pcs_offset", "int", 76),
        ("nmethod", "_scopes_data_offset", "int", 80),
    ];
    /// vmTypes: (name, size, unsigned).
    const TYPES: [(&str, u64, bool); 10] = [
        ("int", 4, false),
        ("int16_t", 2, false),
        ("u1", 1, true),
        ("u2", 2, true),
        ("size_t", 8, true),
        ("bool", 1, true),
        ("CodeHeap", 64, false),
        ("HeapBlock", 16, false),
        ("ConstantPool", 32, false),
        ("PcDesc", 16, false),
    ];
    /// `CodeBlobKind::Nmethod` (JDK 25) and the kind of the other blobs.
    const NMETHOD_KIND: u64 = 1;
    const BUFFER_KIND: u64 = 2;
    const SEGMENT_LOG2: u64 = 6;

    /// libjvm's tables: `fields` and the static fields at `statics` (type, field, type
    /// string, address), `TYPES`, `ints` and one long constant.
    fn tables(
        img: &mut Image,
        fields: &[(&str, &str, &str, u64)],
        statics: &[(&str, &str, &str, u64)],
        types: &[(&str, u64, bool)],
        ints: &[(&str, i64)],
    ) {
        // vmStructs: type name 0, field name 8, type string 16, is static 24, offset 32,
        // address 40.
        let mut structs = Vec::new();
        for (&(ty, field, type_string, at), is_static) in fields
            .iter()
            .map(|f| (f, false))
            .chain(statics.iter().map(|f| (f, true)))
        {
            let (ty, field, ts) = (img.string(ty), img.string(field), img.string(type_string));
            let (offset, address) = if is_static { (0, at) } else { (at, 0) };
            let s = u64::from(is_static);
            structs.push(vec![
                (0, ty, 8),
                (8, field, 8),
                (16, ts, 8),
                (24, s, 4),
                (32, offset, 8),
                (40, address, 8),
            ]);
        }
        img.table("gHotSpotVMStructs", 48, &structs);
        img.vars(
            "gHotSpotVMStructEntry",
            &[
                ("ArrayStride", 48),
                ("TypeNameOffset", 0),
                ("FieldNameOffset", 8),
                ("TypeStringOffset", 16),
                ("IsStaticOffset", 24),
                ("OffsetOffset", 32),
                ("AddressOffset", 40),
            ],
        );
        // vmTypes: name 0, size 16, is unsigned 24.
        let types: Vec<_> = types
            .iter()
            .map(|&(name, size, unsigned)| {
                vec![
                    (0, img.string(name), 8),
                    (16, size, 8),
                    (24, u64::from(unsigned), 4),
                ]
            })
            .collect();
        img.table("gHotSpotVMTypes", 32, &types);
        img.vars(
            "gHotSpotVMTypeEntry",
            &[
                ("ArrayStride", 32),
                ("TypeNameOffset", 0),
                ("SizeOffset", 16),
                ("IsUnsignedOffset", 24),
            ],
        );
        // Constants: name 0, value 8.
        let ints: Vec<_> = ints
            .iter()
            .map(|&(name, v)| vec![(0, img.string(name), 8), (8, v as u64, 4)])
            .collect();
        img.table("gHotSpotVMIntConstants", 16, &ints);
        let longs = vec![vec![
            (0, img.string("markWord::hash_mask"), 8),
            (8, 0x7fff_ffff, 8),
        ]];
        img.table("gHotSpotVMLongConstants", 16, &longs);
        for kind in ["Int", "Long"] {
            let prefix = format!("gHotSpotVM{kind}ConstantEntry");
            img.vars(
                &prefix,
                &[("ArrayStride", 16), ("NameOffset", 0), ("ValueOffset", 8)],
            );
        }
    }

    /// A blob the recorded code cache holds, and what the reader should make of it.
    struct Blob {
        /// Its block: first segment and length in segments.
        segment: u64,
        segments: u64,
        name: &'static str,
        /// Its code, as offsets from the blob.
        code: (u64, u64),
        frame_complete: i64,
        frame_size: u64,
        nmethod: Option<Nmethod>,
    }

    struct Nmethod {
        method: u64,
        compile_id: u64,
        /// The PcDescs, the scopes data and the metadata.
        debug: [Vec<u8>; 3],
    }

    /// Writes a code heap of `segments` segments holding `blobs` (the segments no block
    /// covers free) and returns the CodeHeap's address and the blobs' addresses.
    fn code_heap(img: &mut Image, jdk: Jdk, segments: u64, blobs: &[Blob]) -> (u64, Vec<u64>) {
        let low = img.alloc((segments << SEGMENT_LOG2) as usize, 64);
        let map = img.bytes(&vec![0xff; segments as usize]);
        let heap = img.alloc(64, 8);
        for (at, v) in [
            (0, low),
            (8, low + (segments << SEGMENT_LOG2)),
            (16, map),
            (24, map + segments),
        ] {
            img.put(heap + at, v, 8);
        }
        img.put(heap + 40, SEGMENT_LOG2, 4);
        let names: Vec<u64> = blobs.iter().map(|b| img.string(b.name)).collect();
        let mut addrs = Vec::new();
        for (b, &name) in blobs.iter().zip(&names) {
            let block = low + (b.segment << SEGMENT_LOG2);
            img.put(block, b.segments, 8);
            for k in 0..b.segments {
                img.put(map + b.segment + k, k, 1);
            }
            if b.name.is_empty() {
                // A free block.
                continue;
            }
            img.put(block + 8, 1, 1);
            let blob = block + 16;
            blob_header(img, jdk, blob, name, b);
            addrs.push(blob);
        }
        (heap, addrs)
    }

    fn blob_header(img: &mut Image, jdk: Jdk, blob: u64, name: u64, b: &Blob) {
        let size = (b.segments << SEGMENT_LOG2) - 16;
        img.put(blob, name, 8);
        img.put(blob + 8, size, 4);
        img.put(blob + 16, b.frame_size, 4);
        let kind = if b.nmethod.is_some() {
            NMETHOD_KIND
        } else {
            BUFFER_KIND
        };
        match jdk {
            Jdk::J17 => {
                img.put(blob + 12, b.frame_complete as u64, 4);
                img.put(blob + 24, blob + b.code.0, 8);
                img.put(blob + 32, blob + b.code.1, 8);
            }
            Jdk::J25 => {
                img.put(blob + 12, b.frame_complete as u64, 2);
                img.put(blob + 20, kind, 1);
                img.put(blob + 24, b.code.0, 4);
                img.put(blob + 28, b.code.1, 4);
            }
        }
        if let Some(n) = &b.nmethod {
            img.put(blob + 48, n.method, 8);
            img.put(blob + 56, n.compile_id, 4);
            debug_info(img, jdk, blob, b.code.1, n);
        }
    }

    /// Where `FIELDS_17` and `FIELDS_25` say: JDK 17 after the code, JDK 25 in immutable
    /// (PcDescs, scopes) and mutable data (8 bytes of relocations, metadata).
    fn debug_info(img: &mut Image, jdk: Jdk, blob: u64, code_end: u64, n: &Nmethod) {
        let [pcs, scopes, metadata] = &n.debug;
        match jdk {
            Jdk::J17 => {
                let metadata_at = code_end;
                let scopes_at = metadata_at + metadata.len() as u64;
                let pcs_at = scopes_at + scopes.len() as u64;
                img.put_bytes(blob + metadata_at, metadata);
                img.put_bytes(blob + scopes_at, scopes);
                img.put_bytes(blob + pcs_at, pcs);
                img.put(blob + 60, metadata_at, 4);
                img.put(blob + 64, blob + scopes_at, 8);
                img.put(blob + 72, pcs_at, 4);
                img.put(blob + 76, pcs_at + pcs.len() as u64, 4);
            }
            Jdk::J25 => {
                let immutable = img.bytes(&[&pcs[..], scopes].concat());
                img.put(blob + 64, immutable, 8);
                img.put(blob + 72, (pcs.len() + scopes.len()) as u64, 4);
                img.put(blob + 76, 0, 4);
                img.put(blob + 80, pcs.len() as u64, 4);
                let mutable = img.bytes(&[&[0xee; 8][..], metadata].concat());
                img.put(blob + 32, mutable, 8);
                img.put(blob + 40, 8, 4);
                img.put(blob + 44, 8 + metadata.len() as u64, 4);
            }
        }
    }

    /// The recorded JVM's methods: the outer one inlined the inner one, which inlined the
    /// leaf (a lambda, its hidden class's address in its name); the leaf is also compiled
    /// alone.
    struct Methods {
        outer: u64,
        inner: u64,
        leaf: u64,
    }

    fn stream(jdk: Jdk) -> Unsigned5 {
        match jdk {
            Jdk::J17 => Unsigned5::UP_TO_JDK19,
            Jdk::J25 => Unsigned5::SINCE_JDK20,
        }
    }

    /// The debug information of the outer method's nmethod (`debuginfo`'s recorded one)
    /// and of the leaf's, which inlined nothing: PcDescs at -1, 8 (its own scope) and 33.
    fn nmethods(jdk: Jdk, m: &Methods) -> [Nmethod; 2] {
        let (r, _) = recorded(stream(jdk));
        let metadata = |ms: &[u64]| ms.iter().flat_map(|m| m.to_le_bytes()).collect();
        let mut scopes = vec![0xff];
        for v in [0, 1, 1, 0, 0, 0] {
            scopes.extend(encode(v, stream(jdk)));
        }
        let mut pcs = Vec::new();
        for (pc, scope) in [(-1i32, 0u32), (8, 1), (33, 0)] {
            pcs.extend(pc.to_le_bytes());
            pcs.extend(scope.to_le_bytes());
            pcs.extend([0u8; 8]);
        }
        [
            Nmethod {
                method: m.outer,
                compile_id: 42,
                debug: [r.pcs, r.scopes, metadata(&[m.outer, m.inner, m.leaf])],
            },
            Nmethod {
                method: m.leaf,
                compile_id: 43,
                debug: [pcs, scopes, metadata(&[m.leaf])],
            },
        ]
    }

    /// A blob as the reader should find it: start, end, frame complete, frame size, kind,
    /// name, compile id.
    type BlobSeen = (u64, u64, u64, u32, BlobKind, String, Option<i32>);

    /// What the reader should find in a recorded JVM.
    struct Want {
        version: &'static str,
        interpreter: (u64, u64),
        heaps: (u64, u64),
        blobs: Vec<BlobSeen>,
        methods: Methods,
    }

    /// A JVM as `jdk` lays it out: two code heaps, the first holding the interpreter, a
    /// stub, the outer method's nmethod and a free block, the second the leaf's nmethod.
    fn jvm(jdk: Jdk) -> (Vec<u8>, Want) {
        let mut img = Image::new();
        let statics: [u64; 4] = std::array::from_fn(|_| img.alloc(8, 8));
        let methods = Methods {
            outer: img.method("pkg/Outer", "run"),
            inner: img.method("pkg/Inner", "step"),
            leaf: img.method("pkg/Outer$$Lambda+0x0000000800c01234", "apply"),
        };
        let (a, b) = code_cache(&mut img, jdk, &methods, statics[0]);
        // The interpreter: a StubQueue over the first blob's code.
        let queue = img.alloc(16, 8);
        img.put(queue, a[0] + 96, 8);
        img.put(queue + 8, 128, 4);
        img.put(statics[1], queue, 8);
        let (version, major) = match jdk {
            Jdk::J17 => ("17.0.99+1-recorded", 17),
            Jdk::J25 => ("25.0.9+1-recorded", 25),
        };
        let release = img.string(version);
        img.put(statics[2], release, 8);
        img.put(statics[3], major, 4);
        jdk_tables(&mut img, jdk, statics);
        let want = Want {
            version,
            interpreter: (a[0] + 96, a[0] + 224),
            heaps: (a[0] - 16, b[0] - 16 + 12 * 64),
            blobs: want_blobs(&a, &b, &methods),
            methods,
        };
        (img.into_bytes(), want)
    }

    /// The two code heaps, as `CodeCache::_heaps` (the static at `heaps`) points at them;
    /// the addresses of their blobs.
    fn code_cache(
        img: &mut Image,
        jdk: Jdk,
        methods: &Methods,
        heaps: u64,
    ) -> (Vec<u64>, Vec<u64>) {
        let [outer, leaf] = nmethods(jdk, methods);
        let nmethod = |segment, segments, n, complete| Blob {
            segment,
            segments,
            name: "nmethod",
            code: (96, 224),
            frame_complete: complete,
            frame_size: 6,
            nmethod: Some(n),
        };
        let stub = |segment, segments, name| Blob {
            segment,
            segments,
            name,
            code: (96, segments * 64 - 16),
            frame_complete: -1,
            frame_size: 0,
            nmethod: None,
        };
        let free = Blob {
            name: "",
            ..stub(14, 2, "")
        };
        let first = [
            stub(0, 4, "Interpreter"),
            stub(4, 2, "StubRoutines (1)"),
            nmethod(6, 8, outer, 16),
            free,
        ];
        let second = [nmethod(0, 8, leaf, 0)];
        let (heap_a, a) = code_heap(img, jdk, 24, &first);
        let (heap_b, b) = code_heap(img, jdk, 12, &second);
        let list = img.bytes(&[heap_a.to_le_bytes(), heap_b.to_le_bytes()].concat());
        let array = img.alloc(16, 8);
        img.put(array, 2, 4);
        img.put(array + 8, list, 8);
        img.put(heaps, array, 8);
        (a, b)
    }

    /// libjvm's tables as `jdk` has them, its static fields at `statics` (the code heaps,
    /// the interpreter, the release string, the major version).
    fn jdk_tables(img: &mut Image, jdk: Jdk, statics: [u64; 4]) {
        let (own, mut ints) = match jdk {
            Jdk::J17 => (&FIELDS_17[..], vec![]),
            Jdk::J25 => (
                &FIELDS_25[..],
                vec![("CodeBlobKind::Nmethod", NMETHOD_KIND as i64)],
            ),
        };
        ints.extend([
            ("frame::interpreter_frame_last_sp_offset", -2),
            ("frame::interpreter_frame_sender_sp_offset", -1),
        ]);
        let fields: Vec<_> = FIELDS.iter().chain(own).copied().collect();
        let [heaps, code, release, major] = statics;
        let statics = [
            ("CodeCache", "_heaps", "GrowableArray<CodeHeap*>*", heaps),
            ("AbstractInterpreter", "_code", "StubQueue*", code),
            (
                "Abstract_VM_Version",
                "_s_vm_release",
                "const char*",
                release,
            ),
            ("Abstract_VM_Version", "_vm_major_version", "int", major),
        ];
        tables(img, &fields, &statics, &TYPES, &ints);
    }

    /// The blobs the reader should find in the heaps whose blobs lie at `a` and `b`.
    fn want_blobs(a: &[u64], b: &[u64], m: &Methods) -> Vec<BlobSeen> {
        let blob = |at: u64, end: u64, complete: u64, size: u32, kind: BlobKind, name: &str| {
            (at + 96, at + end, complete, size, kind, name.to_string())
        };
        let outer = BlobKind::Nmethod { method: m.outer };
        let leaf = BlobKind::Nmethod { method: m.leaf };
        let seen = [
            blob(
                a[0],
                240,
                a[0] + 240,
                0,
                BlobKind::Interpreter,
                "Interpreter",
            ),
            blob(a[1], 112, a[1] + 112, 0, BlobKind::Stub, "StubRoutines (1)"),
            blob(a[2], 224, a[2] + 96 + 16, 6, outer, "pkg.Outer.run"),
            blob(b[0], 224, b[0] + 96, 6, leaf, "pkg.Outer$$Lambda.apply"),
        ];
        let ids = [None, None, Some(42), Some(43)];
        seen.into_iter()
            .zip(ids)
            .map(|((start, end, complete, size, kind, name), id)| {
                (start, end, complete, size, kind, name, id)
            })
            .collect()
    }

    #[test]
    fn a_recorded_jvm_reads_into_its_blobs_names_and_inlining() {
        for jdk in [Jdk::J17, Jdk::J25] {
            let (image, want) = jvm(jdk);
            let (lib, mem) = recorded_jvm(&image);
            let mut jvm = Jvm::attach(7, Box::new(mem), &lib).expect("attach");
            assert_eq!(jvm.version().as_deref(), Some(want.version), "{jdk:?}");
            assert_eq!(jvm.interpreter(), want.interpreter, "{jdk:?}");
            assert_eq!(jvm.interpreter_method_offset_words(), -3);
            assert_eq!(jvm.interpreter_sender_sp_offset_words(), -1);
            let mut blobs = jvm.code_blobs().expect("walk the code cache");
            let seen: Vec<_> = blobs
                .iter()
                .map(|b| {
                    let (kind, name) = (b.kind.clone(), b.name.clone());
                    (
                        b.start,
                        b.end,
                        b.frame_complete,
                        b.frame_size_words,
                        kind,
                        name,
                        b.compile_id(),
                    )
                })
                .collect();
            assert_eq!(seen, want.blobs, "{jdk:?}");
            assert_eq!(jvm.code_heaps(), want.heaps, "{jdk:?}");

            let read = jvm.read_inlining(&mut blobs, Duration::from_secs(60));
            assert_eq!(
                (read.decoded, read.inlined, read.failed),
                (2, 1, 0),
                "{jdk:?}"
            );
            let Methods { outer, inner, leaf } = want.methods;
            let at = blobs[2].start + 34;
            assert_eq!(
                blobs[2].inlined_at(at),
                Some(&[outer, inner, leaf][..]),
                "{jdk:?}"
            );
            assert_eq!(blobs[3].inlining, None, "{jdk:?}: it inlined nothing");
            let names: Vec<String> = [outer, inner, leaf]
                .map(|m| jvm.method_name(m).expect("a name"))
                .into();
            assert_eq!(
                names,
                ["pkg.Outer.run", "pkg.Inner.step", "pkg.Outer$$Lambda.apply"]
            );
            let scopes = jvm.pc_scopes(&blobs[3]).expect("the leaf's scopes");
            let own = Scope {
                method: leaf,
                bci: 0,
            };
            let empty = PcScopes {
                pc_offset: 33,
                scopes: vec![],
            };
            assert_eq!(
                scopes,
                [
                    PcScopes {
                        pc_offset: 8,
                        scopes: vec![own]
                    },
                    empty
                ]
            );
            // Read once: the next walk finds it cached.
            let mut again = jvm.code_blobs().expect("walk again");
            let read = jvm.read_inlining(&mut again, Duration::ZERO);
            assert_eq!((read.decoded, read.cached), (0, 2), "{jdk:?}");
        }
    }

    #[test]
    fn vm_structs_are_read_from_a_recorded_image() {
        let mut img = Image::new();
        let fields = [
            ("Klass", "_name", "Symbol*", 16),
            ("Symbol", "_length", "u2", 0),
        ];
        let statics = [("Universe", "_collectedHeap", "CollectedHeap*", 0x1234)];
        let types = [("Klass", 200, false), ("u2", 2, true)];
        tables(
            &mut img,
            &fields,
            &statics,
            &types,
            &[("Method::_native", -5)],
        );
        let (lib, source) = recorded_jvm(&img.into_bytes());
        let mem = Memory {
            pid: 4242,
            source: Box::new(source),
        };
        let vm = VmStructs::read(&mem, &lib).expect("read the recorded tables");
        let field = |ty, name| {
            vm.field(4242, ty, name)
                .map(|f| (f.offset, f.size, f.signed))
        };
        assert_eq!(field("Klass", "_name").ok(), Some((16, 8, false)));
        assert_eq!(field("Symbol", "_length").ok(), Some((0, 2, false)));
        assert!(field("Universe", "_collectedHeap").is_err(), "static");
        let heap = vm.static_address(4242, "Universe", "_collectedHeap");
        assert_eq!(heap.ok(), Some(0x1234));
        assert_eq!(vm.size_of(4242, "Klass").ok(), Some(200));
        assert_eq!(vm.int_constants["Method::_native"], -5);

        // Without one exported variable: an error that names it, and nothing panics.
        let symbols = LIBJVM_VARIABLES
            .iter()
            .zip((IMAGE_BASE..).step_by(8))
            .filter(|(name, _)| **name != "gHotSpotVMTypeEntrySizeOffset")
            .map(|(name, at)| (name.to_string(), at))
            .collect();
        let Err(err) = VmStructs::read(&mem, &Libjvm::from_symbols(symbols)) else {
            panic!("tables without gHotSpotVMTypeEntrySizeOffset were read");
        };
        let err = err.to_string();
        assert!(err.contains("gHotSpotVMTypeEntrySizeOffset"), "{err}");
    }

    /// The fuzz target's seeds (`fuzz/seeds/jvm/`) are these recorded JVMs, so it starts from
    /// JVMs the reader reads whole; `UPDATE_FUZZ_SEEDS=1` writes them again.
    #[test]
    fn the_fuzz_seeds_are_the_recorded_jvms() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/seeds/jvm");
        for (name, jdk) in [("jdk17", Jdk::J17), ("jdk25", Jdk::J25)] {
            let (image, _) = jvm(jdk);
            let path = dir.join(name);
            if std::env::var_os("UPDATE_FUZZ_SEEDS").is_some() {
                std::fs::create_dir_all(&dir).expect("create the seeds' folder");
                std::fs::write(&path, &image).expect("write a seed");
            }
            let seed = std::fs::read(&path).unwrap_or_else(|e| {
                panic!("{}: {e} (UPDATE_FUZZ_SEEDS=1 writes it)", path.display())
            });
            assert!(
                seed == image,
                "{} is not the recorded {jdk:?} JVM: UPDATE_FUZZ_SEEDS=1 writes it again",
                path.display()
            );
        }
    }
}
