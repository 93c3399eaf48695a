//! An LED of Linux's LED class (`/sys/class/leds/NAME`): its kernel trigger
//! is switched off, then `brightness` is written. Dim is an eighth of
//! `max_brightness`, which on an on/off LED is simply on.

use super::{Level, Light};
use std::path::{Path, PathBuf};

pub struct SysfsLed {
    brightness: PathBuf,
    max: u32,
}

impl SysfsLed {
    pub fn open(dir: &Path) -> std::io::Result<SysfsLed> {
        let max = std::fs::read_to_string(dir.join("max_brightness"))?
            .trim()
            .parse()
            .map_err(|_| std::io::Error::other("max_brightness is not a number"))?;
        // Without this the kernel's own trigger (the Pi's ACT LED shows SD
        // card activity) keeps overwriting what we show.
        std::fs::write(dir.join("trigger"), "none")?;
        Ok(SysfsLed {
            brightness: dir.join("brightness"),
            max,
        })
    }
}

impl Light for SysfsLed {
    fn set(&mut self, level: Level) -> std::io::Result<()> {
        let value = match level {
            Level::Off => 0,
            Level::Dim => (self.max / 8).max(1),
            Level::On => self.max,
        };
        std::fs::write(&self.brightness, value.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fake_led(max: u32) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("max_brightness"), format!("{max}\n")).unwrap();
        std::fs::write(dir.path().join("trigger"), "[mmc0] none timer\n").unwrap();
        std::fs::write(dir.path().join("brightness"), "0\n").unwrap();
        dir
    }

    fn brightness(dir: &tempfile::TempDir) -> String {
        std::fs::read_to_string(dir.path().join("brightness")).unwrap()
    }

    #[test]
    fn takes_the_led_from_its_trigger_and_writes_brightness() {
        let dir = fake_led(255);
        let mut led = SysfsLed::open(dir.path()).unwrap();
        assert_eq!(
            std::fs::read_to_string(dir.path().join("trigger")).unwrap(),
            "none"
        );
        led.set(Level::On).unwrap();
        assert_eq!(brightness(&dir), "255");
        led.set(Level::Dim).unwrap();
        assert_eq!(brightness(&dir), "31");
        led.set(Level::Off).unwrap();
        assert_eq!(brightness(&dir), "0");
    }

    #[test]
    fn an_on_off_led_shows_dim_as_on() {
        let dir = fake_led(1);
        let mut led = SysfsLed::open(dir.path()).unwrap();
        led.set(Level::Dim).unwrap();
        assert_eq!(brightness(&dir), "1");
    }

    #[test]
    fn a_missing_led_is_an_error_at_open() {
        assert!(SysfsLed::open(Path::new("/nonexistent/leds/ACT")).is_err());
    }
}
