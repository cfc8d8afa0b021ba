// WebShop (rubricgym): optional progressive enhancement, no dependencies.
// Choosing an option's radio button follows the option's link (the label is that link,
// so everything also works with JavaScript disabled).
document.addEventListener("change", function (event) {
  var target = event.target;
  if (target && target.matches && target.matches("input[type=radio][data-href]")) {
    window.location.assign(target.getAttribute("data-href"));
  }
});
