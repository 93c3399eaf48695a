//! An LED on a GPIO pin, through rppal (Raspberry Pi's `/dev/gpiomem`).
//! Dim is software PWM at 10 % duty. On a machine that is not a Pi, opening
//! the pin fails with rppal's reason.

use super::{Level, Light};
use rppal::gpio::{Gpio, OutputPin};

/// PWM frequency for dim: fast enough not to flicker to the eye.
const DIM_HZ: f64 = 200.0;
const DIM_DUTY: f64 = 0.1;

pub struct GpioPin {
    pin: OutputPin,
    active_low: bool,
}

impl GpioPin {
    pub fn open(bcm: u8, active_low: bool) -> Result<GpioPin, rppal::gpio::Error> {
        let pin = Gpio::new()?.get(bcm)?.into_output();
        Ok(GpioPin { pin, active_low })
    }
}

impl Light for GpioPin {
    fn set(&mut self, level: Level) -> std::io::Result<()> {
        let lit = |on: bool| on != self.active_low;
        match level {
            Level::Dim => {
                let duty = if self.active_low {
                    1.0 - DIM_DUTY
                } else {
                    DIM_DUTY
                };
                self.pin
                    .set_pwm_frequency(DIM_HZ, duty)
                    .map_err(std::io::Error::other)?;
            }
            Level::On | Level::Off => {
                self.pin.clear_pwm().map_err(std::io::Error::other)?;
                if lit(level == Level::On) {
                    self.pin.set_high();
                } else {
                    self.pin.set_low();
                }
            }
        }
        Ok(())
    }
}
