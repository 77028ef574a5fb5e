//! Writing a bundle's members into the slot that is not running: the slot loses its boot
//! entry first, then `root.img` streams into its partition and the kernel and initrd onto
//! the ESP under temporary names, each hashed from the very bytes written. A member is
//! refused before a byte of it is written when its size is not the manifest's; the
//! temporary files are removed on every error; the kernel and initrd take their names only
//! once every member matched.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use super::bundle::{self, Manifest, Reader};
use super::slots::{self, Slot};
use super::{ImageError, Paths};

/// Files that are removed when dropped, unless [`Scratch::keep`] was called.
#[derive(Default)]
pub(super) struct Scratch(Vec<PathBuf>);

impl Scratch {
    /// Removes `path` when the scratch is dropped.
    pub(super) fn add(&mut self, path: PathBuf) {
        self.0.push(path);
    }

    /// Keeps every file (they were renamed into place).
    pub(super) fn keep(&mut self) {
        self.0.clear();
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        for p in &self.0 {
            let _ = fs::remove_file(p);
        }
    }
}

pub(super) fn esp_err(path: &Path) -> impl FnOnce(io::Error) -> ImageError {
    let path = path.to_path_buf();
    move |source| ImageError::Esp { path, source }
}

/// Everything but the boot entry: checks the partition and the ESP have room, takes the
/// target slot's entry away, then writes the members; returns the root filesystem's size.
pub(super) fn write_slot<R: Read>(
    r: &mut Reader<R>,
    m: &Manifest,
    target: Slot,
    entries: &[slots::Entry],
    p: &Paths,
) -> Result<u64, ImageError> {
    let dev = p.partitions.join(format!("sluice-root-{target}"));
    let mut part = OpenOptions::new()
        .write(true)
        .open(&dev)
        .map_err(|source| ImageError::Open {
            path: dev.clone(),
            source,
        })?;
    let have = part.seek(SeekFrom::End(0)).map_err(ImageError::Write)?;
    part.seek(SeekFrom::Start(0)).map_err(ImageError::Write)?;
    let need = m.files["root.img"].size;
    if need > have {
        return Err(ImageError::TooBig {
            need,
            have,
            slot: target,
        });
    }
    let boot = m.files["vmlinuz"]
        .size
        .saturating_add(m.files["initrd"].size);
    let st = nix::sys::statvfs::statvfs(&p.esp)
        .map_err(|e| esp_err(&p.esp)(io::Error::from_raw_os_error(e as i32)))?;
    let free = st.blocks_available().saturating_mul(st.fragment_size());
    if boot > free {
        return Err(ImageError::EspFull { need: boot, free });
    }
    // The target slot stops being bootable before a byte of it changes.
    let edir = slots::entries_dir(&p.esp);
    for e in entries.iter().filter(|e| e.slot == target) {
        let f = edir.join(&e.file);
        fs::remove_file(&f).map_err(esp_err(&f))?;
    }
    nix::unistd::sync();
    write_members(r, m, target, &mut part, &p.esp)?;
    Ok(need)
}

/// Streams every member to its place (root.img to the partition, the kernel and initrd to
/// the ESP under temporary names, renamed once all of them matched).
fn write_members<R: Read>(
    r: &mut Reader<R>,
    m: &Manifest,
    target: Slot,
    part: &mut File,
    esp: &Path,
) -> Result<(), ImageError> {
    let kdir = esp.join(format!("sluice/{target}"));
    fs::create_dir_all(&kdir).map_err(esp_err(&kdir))?;
    let mut scratch = Scratch::default();
    let mut seen: Vec<String> = Vec::new();
    while let Some((name, size)) = r.next_member()? {
        let Some(want) = m.files.get(&name).filter(|_| !seen.contains(&name)) else {
            return Err(ImageError::Missing(name, target));
        };
        if size != want.size {
            return Err(ImageError::MemberSize {
                member: name,
                held: size,
                want: want.size,
                slot: target,
            });
        }
        let got = if name == "root.img" {
            let mut w = Ext4Check::new(&mut *part);
            let got = r.copy_to(size, &mut w)?;
            w.finish()?;
            part.sync_all().map_err(ImageError::Write)?;
            got
        } else {
            let tmp = kdir.join(format!(".{name}.new"));
            scratch.add(tmp.clone());
            let mut f = File::create(&tmp).map_err(esp_err(&tmp))?;
            let got = r.copy_to(size, &mut f)?;
            f.sync_all().map_err(ImageError::Write)?;
            got
        };
        if got != want.sha256 {
            return Err(ImageError::MemberSum {
                member: name,
                got,
                want: want.sha256.clone(),
                slot: target,
            });
        }
        seen.push(name);
    }
    if let Some(m) = bundle::MEMBERS
        .iter()
        .find(|n| !seen.iter().any(|s| s == *n))
    {
        return Err(ImageError::Missing(m.to_string(), target));
    }
    for name in ["vmlinuz", "initrd"] {
        let (tmp, fin) = (kdir.join(format!(".{name}.new")), kdir.join(name));
        fs::rename(&tmp, &fin).map_err(esp_err(&fin))?;
    }
    scratch.keep();
    Ok(())
}

/// Passes bytes through once the first 2 KiB show an ext4 superblock.
struct Ext4Check<W> {
    out: W,
    head: Vec<u8>,
    checked: bool,
}

impl<W: Write> Ext4Check<W> {
    fn new(out: W) -> Self {
        Ext4Check {
            out,
            head: Vec::with_capacity(2048),
            checked: false,
        }
    }

    fn check(&mut self) -> io::Result<()> {
        // The superblock starts at 1024; its magic 0xEF53 is at offset 56 in it.
        if self.head.len() < 1082 || self.head[1080..1082] != [0x53, 0xef] {
            return Err(io::Error::other("root.img is not an ext4 filesystem"));
        }
        self.checked = true;
        self.out.write_all(&self.head)
    }

    fn finish(mut self) -> Result<(), ImageError> {
        if !self.checked {
            self.check().map_err(|_| ImageError::NotExt4)?;
        }
        self.out.flush().map_err(ImageError::Write)
    }
}

impl<W: Write> Write for Ext4Check<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.checked {
            return self.out.write(buf);
        }
        let take = (2048 - self.head.len()).min(buf.len());
        self.head.extend_from_slice(&buf[..take]);
        if self.head.len() == 2048 {
            self.check()?;
        }
        Ok(take)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }
}
