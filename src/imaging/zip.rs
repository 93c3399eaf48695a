//! A ZIP archive of files stored as they are (remove.bg's `format=zip`
//! holds a JPEG and a PNG, which deflate would not shrink): the local
//! headers, the central directory and its end record of APPNOTE 6.3.
//! Not Zip64, so every file and the archive stay under 4 GiB; a cut-out's
//! two files are at most a few hundred MB.

/// "Version needed to extract": 1.0, stored files only.
const VERSION: u16 = 10;
/// Bit 11: names are UTF-8.
const FLAGS: u16 = 1 << 11;
/// 1980-01-01 00:00 in MS-DOS time and date: no clock goes into the file.
const DOS_TIME: u16 = 0;
const DOS_DATE: u16 = (1 << 5) | 1;

/// An archive holding each `(name, bytes)`, in order.
pub fn stored(files: &[(&str, Vec<u8>)]) -> Vec<u8> {
    let mut archive = Vec::new();
    let mut directory = Vec::new();
    for (name, bytes) in files {
        let offset = archive.len() as u32;
        let crc = crc32fast::hash(bytes);
        let size = u32::try_from(bytes.len()).expect("a file under 4 GiB");
        // The fields the local header and the directory entry share.
        let mut common = Vec::new();
        for half in [VERSION, FLAGS, 0, DOS_TIME, DOS_DATE] {
            common.extend_from_slice(&half.to_le_bytes());
        }
        for word in [crc, size, size] {
            common.extend_from_slice(&word.to_le_bytes());
        }
        common.extend_from_slice(&(name.len() as u16).to_le_bytes());
        common.extend_from_slice(&0u16.to_le_bytes()); // extra field length

        archive.extend_from_slice(&0x0403_4b50u32.to_le_bytes());
        archive.extend_from_slice(&common);
        archive.extend_from_slice(name.as_bytes());
        archive.extend_from_slice(bytes);

        directory.extend_from_slice(&0x0201_4b50u32.to_le_bytes());
        directory.extend_from_slice(&VERSION.to_le_bytes()); // made by: MS-DOS, 1.0
        directory.extend_from_slice(&common);
        // Comment length, disk number, internal and external attributes.
        directory.extend_from_slice(&[0; 2 + 2 + 2 + 4]);
        directory.extend_from_slice(&offset.to_le_bytes());
        directory.extend_from_slice(name.as_bytes());
    }
    let directory_offset = archive.len() as u32;
    archive.extend_from_slice(&directory);
    archive.extend_from_slice(&0x0605_4b50u32.to_le_bytes());
    archive.extend_from_slice(&[0; 4]); // this disk, the directory's disk
    let count = files.len() as u16;
    archive.extend_from_slice(&count.to_le_bytes());
    archive.extend_from_slice(&count.to_le_bytes());
    archive.extend_from_slice(&(directory.len() as u32).to_le_bytes());
    archive.extend_from_slice(&directory_offset.to_le_bytes());
    archive.extend_from_slice(&0u16.to_le_bytes()); // comment length
    archive
}
