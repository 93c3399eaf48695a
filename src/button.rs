//! The appliance's button: proof that someone stands at the board. One
//! thread reads it twenty times a second and reports each press (a change
//! from released to pressed, held at least two reads, so that a bouncing
//! contact counts once). Inputs, chosen in `[button]`: `gpio_pin` (a
//! push button between the pin and ground, through rppal, with the pin's
//! pull-up) or `value_file` (a file that reads `1` while pressed, as a
//! Linux sysfs GPIO's `value` does).

use crate::config::ButtonConfig;
use rppal::gpio::{Gpio, InputPin};
use std::path::PathBuf;
use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::thread::JoinHandle;
use std::time::Duration;

const TICK: Duration = Duration::from_millis(50);

/// Something that can say whether it is pressed now.
pub trait Input: Send {
    fn pressed(&mut self) -> std::io::Result<bool>;
}

struct Pin(InputPin);

impl Input for Pin {
    fn pressed(&mut self) -> std::io::Result<bool> {
        // Pulled up: the button connects the pin to ground.
        Ok(self.0.is_low())
    }
}

struct ValueFile(PathBuf);

impl Input for ValueFile {
    fn pressed(&mut self) -> std::io::Result<bool> {
        Ok(std::fs::read_to_string(&self.0)?.trim() == "1")
    }
}

impl ButtonConfig {
    /// The configured input; `None` when no button is configured.
    pub fn open(&self) -> Option<Result<Box<dyn Input>, String>> {
        match (self.gpio_pin, &self.value_file) {
            (Some(_), Some(_)) => Some(Err("button: set gpio_pin or value_file, not both".into())),
            (Some(pin), None) => Some(
                Gpio::new()
                    .and_then(|gpio| gpio.get(pin))
                    .map(|p| Box::new(Pin(p.into_input_pullup())) as Box<dyn Input>)
                    .map_err(|e| format!("button on GPIO {pin}: {e}")),
            ),
            (None, Some(path)) => Some(Ok(Box::new(ValueFile(path.clone())))),
            (None, None) => None,
        }
    }
}

/// The thread that reads the button.
pub struct Button {
    stop: Sender<()>,
    thread: Option<JoinHandle<()>>,
}

impl Button {
    /// Starts reading `input`; `pressed` runs on the reading thread at
    /// each press.
    pub fn start(mut input: Box<dyn Input>, pressed: impl Fn() + Send + 'static) -> Button {
        let (stop, stopped) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("button".into())
            .spawn(move || {
                let (mut down_for, mut failed) = (0u32, false);
                loop {
                    match input.pressed() {
                        Ok(true) => {
                            down_for += 1;
                            if down_for == 2 {
                                pressed();
                            }
                        }
                        Ok(false) => down_for = 0,
                        // Said once: a broken input must not flood the log.
                        Err(e) if !failed => {
                            log::warn!("button: {e}");
                            failed = true;
                        }
                        Err(_) => {}
                    }
                    match stopped.recv_timeout(TICK) {
                        Err(RecvTimeoutError::Timeout) => {}
                        Ok(()) | Err(RecvTimeoutError::Disconnected) => break,
                    }
                }
            })
            .expect("spawning the button thread");
        Button {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for Button {
    fn drop(&mut self) {
        let _ = self.stop.send(());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    #[test]
    fn a_press_counts_once_however_long_it_is_held() {
        let dir = tempfile::tempdir().unwrap();
        let value = dir.path().join("value");
        std::fs::write(&value, "0\n").unwrap();
        let config = ButtonConfig {
            value_file: Some(value.clone()),
            ..ButtonConfig::default()
        };
        let presses = Arc::new(AtomicUsize::new(0));
        let counted = presses.clone();
        let button = Button::start(config.open().unwrap().unwrap(), move || {
            counted.fetch_add(1, Ordering::SeqCst);
        });
        std::fs::write(&value, "1\n").unwrap();
        std::thread::sleep(TICK * 8);
        assert_eq!(presses.load(Ordering::SeqCst), 1, "held: one press");
        std::fs::write(&value, "0\n").unwrap();
        std::thread::sleep(TICK * 3);
        std::fs::write(&value, "1\n").unwrap();
        std::thread::sleep(TICK * 4);
        std::fs::write(&value, "0\n").unwrap();
        std::thread::sleep(TICK * 3);
        drop(button);
        assert_eq!(presses.load(Ordering::SeqCst), 2);
    }

    #[test]
    fn no_button_both_inputs_or_a_missing_pin_are_said_plainly() {
        assert!(ButtonConfig::default().open().is_none());
        let both = ButtonConfig {
            gpio_pin: Some(17),
            value_file: Some("/x".into()),
        };
        assert!(both.open().unwrap().err().unwrap().contains("not both"));
        let pin = ButtonConfig {
            gpio_pin: Some(17),
            value_file: None,
        };
        // This machine is not a Pi: rppal's reason, with the pin.
        assert!(pin.open().unwrap().err().unwrap().contains("GPIO 17"));
    }
}
