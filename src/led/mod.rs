//! The status LED. One thread owns the light and redraws it eight times a
//! second from what the appliance is doing: starting (slow blink), idle
//! (dim or off, configurable), busy while any image is being processed
//! (on), degraded (fast blink: the model failed to load or the database is
//! not writable), waiting for the button (two short blinks a second: a
//! browser waits to set the password, or a booth to be paired), and off
//! after a clean stop. Backends, chosen in the
//! configuration: `gpio` (a pin, through rppal), `sysfs` (a Linux LED class
//! device such as the Pi's `ACT`), `none`.

mod gpio;
mod sysfs;

pub use gpio::GpioPin;
pub use sysfs::SysfsLed;

use crate::config::{IdleLight, LedConfig};
use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::thread::JoinHandle;
use std::time::Duration;

/// What the appliance is doing, as the LED shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    Starting,
    Idle,
    Busy,
    Degraded,
    Waiting,
}

impl State {
    pub fn name(self) -> &'static str {
        match self {
            State::Starting => "starting",
            State::Idle => "idle",
            State::Busy => "busy",
            State::Degraded => "degraded",
            State::Waiting => "waiting for the button",
        }
    }
}

/// How bright the light is at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    Off,
    Dim,
    On,
}

/// A light the LED thread can set. `Send` so the thread can own it.
pub trait Light: Send {
    fn set(&mut self, level: Level) -> std::io::Result<()>;
}

/// The `none` backend.
pub struct NoLight;

impl Light for NoLight {
    fn set(&mut self, _: Level) -> std::io::Result<()> {
        Ok(())
    }
}

const TICK: Duration = Duration::from_millis(125);

/// The level at `tick` (eight a second): a 1 Hz blink while starting, a
/// 4 Hz blink when degraded.
pub fn level_at(state: State, idle: Level, tick: u64) -> Level {
    match state {
        State::Starting if tick % 8 < 4 => Level::On,
        State::Degraded if tick.is_multiple_of(2) => Level::On,
        State::Waiting if matches!(tick % 8, 0 | 2) => Level::On,
        State::Starting | State::Degraded | State::Waiting => Level::Off,
        State::Busy => Level::On,
        State::Idle => idle,
    }
}

impl LedConfig {
    /// Opens the configured light.
    pub fn open(&self) -> Result<Box<dyn Light>, String> {
        match self.backend.as_deref().unwrap_or("none") {
            "none" => Ok(Box::new(NoLight)),
            "sysfs" => {
                let path = self
                    .sysfs_path
                    .clone()
                    .unwrap_or_else(|| "/sys/class/leds/ACT".into());
                SysfsLed::open(&path)
                    .map(|led| Box::new(led) as Box<dyn Light>)
                    .map_err(|e| format!("LED {}: {e}", path.display()))
            }
            "gpio" => {
                let pin = self
                    .gpio_pin
                    .ok_or("led.gpio_pin is needed for the gpio backend")?;
                GpioPin::open(pin, self.active_low.unwrap_or(false))
                    .map(|led| Box::new(led) as Box<dyn Light>)
                    .map_err(|e| format!("LED on GPIO {pin}: {e}"))
            }
            other => Err(format!(
                "led.backend must be none, sysfs or gpio, not {other:?}"
            )),
        }
    }

    pub fn idle_level(&self) -> Level {
        match self.idle {
            None | Some(IdleLight::Off) => Level::Off,
            Some(IdleLight::Dim) => Level::Dim,
        }
    }
}

/// The thread that owns the light.
pub struct Led {
    stop: Sender<()>,
    thread: Option<JoinHandle<()>>,
}

impl Led {
    /// Starts the thread; `state` is asked what to show at every tick.
    pub fn start(
        mut light: Box<dyn Light>,
        idle: Level,
        state: impl Fn() -> State + Send + 'static,
    ) -> Led {
        let (stop, stopped) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("led".into())
            .spawn(move || {
                let mut shown = None;
                let mut failed = false;
                for tick in 0.. {
                    let level = level_at(state(), idle, tick);
                    if shown != Some(level) {
                        match light.set(level) {
                            Ok(()) => shown = Some(level),
                            // Said once: a broken LED must not flood the log.
                            Err(e) if !failed => {
                                log::warn!("status LED: {e}");
                                failed = true;
                            }
                            Err(_) => {}
                        }
                    }
                    match stopped.recv_timeout(TICK) {
                        Err(RecvTimeoutError::Timeout) => {}
                        Ok(()) | Err(RecvTimeoutError::Disconnected) => break,
                    }
                }
                let _ = light.set(Level::Off);
            })
            .expect("spawning the LED thread");
        Led {
            stop,
            thread: Some(thread),
        }
    }

    /// Turns the light off and ends the thread.
    pub fn stop(mut self) {
        self.finish();
    }

    fn finish(&mut self) {
        let _ = self.stop.send(());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for Led {
    fn drop(&mut self) {
        self.finish();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    #[test]
    fn each_state_has_its_pattern() {
        let over_a_second =
            |state, idle| (0..8).map(|t| level_at(state, idle, t)).collect::<Vec<_>>();
        use Level::*;
        assert_eq!(
            over_a_second(State::Starting, Off),
            [On, On, On, On, Off, Off, Off, Off]
        );
        assert_eq!(
            over_a_second(State::Degraded, Off),
            [On, Off, On, Off, On, Off, On, Off]
        );
        assert_eq!(
            over_a_second(State::Waiting, Dim),
            [On, Off, On, Off, Off, Off, Off, Off]
        );
        assert_eq!(over_a_second(State::Busy, Off), [On; 8]);
        assert_eq!(over_a_second(State::Idle, Dim), [Dim; 8]);
        assert_eq!(over_a_second(State::Idle, Off), [Off; 8]);
    }

    /// A pin that remembers every level it was set to.
    #[derive(Clone, Default)]
    struct FakePin(Arc<Mutex<Vec<Level>>>);

    impl Light for FakePin {
        fn set(&mut self, level: Level) -> std::io::Result<()> {
            self.0.lock().unwrap().push(level);
            Ok(())
        }
    }

    #[test]
    fn the_thread_follows_the_state_and_leaves_the_light_off() {
        let pin = FakePin::default();
        let state = Arc::new(Mutex::new(State::Busy));
        let seen = state.clone();
        let led = Led::start(Box::new(pin.clone()), Level::Dim, move || {
            *seen.lock().unwrap()
        });
        let wait_for = |level| {
            for _ in 0..200 {
                if pin.0.lock().unwrap().last() == Some(&level) {
                    return;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            panic!(
                "the light never went {level:?}: {:?}",
                pin.0.lock().unwrap()
            );
        };
        wait_for(Level::On);
        *state.lock().unwrap() = State::Idle;
        wait_for(Level::Dim);
        led.stop();
        assert_eq!(pin.0.lock().unwrap().last(), Some(&Level::Off));
        let levels = pin.0.lock().unwrap().clone();
        assert!(
            levels.windows(2).all(|w| w[0] != w[1]),
            "only changes are written: {levels:?}"
        );
    }

    #[test]
    fn an_unknown_backend_or_a_gpio_without_a_pin_is_a_clear_error() {
        let config = LedConfig {
            backend: Some("blinky".into()),
            ..LedConfig::default()
        };
        assert!(config.open().err().unwrap().contains("none, sysfs or gpio"));
        let config = LedConfig {
            backend: Some("gpio".into()),
            ..LedConfig::default()
        };
        assert!(config.open().err().unwrap().contains("gpio_pin"));
    }
}
