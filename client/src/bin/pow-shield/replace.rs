//! A file the CLI writes for nginx to include (`bot-keys`, `asn-geo`):
//! replaced whole or not at all, and left alone when it holds the text
//! already, so that a cron job reloads nginx only when something changed.

use std::fs;
use std::io;

/// Writes `text` to `file` unless it holds it already, through a temporary
/// file renamed over it (nginx never reads half a file): `Ok(true)` written,
/// `Ok(false)` unchanged.
pub fn replace_if_changed(file: &str, text: &str) -> io::Result<bool> {
    if fs::read_to_string(file).is_ok_and(|old| old == text) {
        return Ok(false);
    }
    let tmp = format!("{file}.tmp");
    match fs::write(&tmp, text).and_then(|()| fs::rename(&tmp, file)) {
        Ok(()) => Ok(true),
        Err(e) => {
            let _ = fs::remove_file(&tmp);
            Err(e)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_is_written_once_then_left_alone_until_its_text_changes() {
        let dir = std::env::temp_dir().join(format!("pow-shield-replace-{}", std::process::id()));
        fs::create_dir_all(&dir).expect("a directory");
        let file = dir.join("out.conf");
        let file = file.to_str().expect("a UTF-8 path");
        assert!(replace_if_changed(file, "a\n").expect("written"));
        assert!(!replace_if_changed(file, "a\n").expect("unchanged"));
        assert!(replace_if_changed(file, "b\n").expect("written again"));
        assert_eq!(fs::read_to_string(file).expect("read"), "b\n");
        let missing = dir.join("missing").join("out.conf");
        assert!(replace_if_changed(missing.to_str().expect("UTF-8"), "a\n").is_err());
        let _ = fs::remove_dir_all(&dir);
    }
}
